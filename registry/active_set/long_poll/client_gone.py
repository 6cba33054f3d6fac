"""Ending a long-poll when its client hangs up, over plain ASGI.

The server reports a closed connection as `http.disconnect` on the request's `receive` channel,
after the request itself (a GET's one empty `http.request`). A handler that never asks only
learns of it when it finally writes its answer to nobody."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from starlette.types import Message, Receive

T = TypeVar("T")


class ClientGone(Exception):
    """The client closed its connection before the answer was ready."""


class ReplayedReceive:
    """`receive`, with what was read through it to watch for the client kept for whoever reads
    next (the endpoint, when the fast path hands the request on)."""

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self._read: list[Message] = []

    async def __call__(self) -> Message:
        if self._read:
            return self._read.pop(0)
        return await self._receive()

    async def until_disconnect(self) -> None:
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                return
            self._read.append(message)  # the request's body: another reader may want it


async def unless_client_goes(answering: Coroutine[Any, Any, T], receive: ReplayedReceive) -> T:
    """`answering`'s result; ClientGone, with `answering` cancelled, when the client hangs up
    first."""
    answer = asyncio.ensure_future(answering)
    gone = asyncio.ensure_future(receive.until_disconnect())
    try:
        await asyncio.wait((answer, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not answer.done():
            answer.cancel()
    if answer.cancelled():
        raise ClientGone
    return answer.result()
