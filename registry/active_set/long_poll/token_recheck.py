"""Tokens of long-polls checked again as they wake, together: a change that wakes a thousand
nodes costs one query, not one per node.

A long-poll may outlive its token (revoked or expired while it waited). Each woken poll that must
be checked again (protocol.py says when) joins the batch of its wake-up; the batch runs once the
polls woken together have joined, in one transaction, and each poll learns whether its own token
still holds."""

from __future__ import annotations

import asyncio

from starlette.concurrency import run_in_threadpool

from registry.auth import tokens
from registry.db import plain_transaction
from registry.errors import Unauthorized
from registry.metrics import TOKEN_RECHECKS

JOIN_S = 0.005  # a wake-up's polls resume within a few turns of the event loop: wait for them all


class TokenRecheck:
    def __init__(self) -> None:
        self._pending: dict[int, list[asyncio.Future]] = {}
        self._running: asyncio.Task | None = None

    async def still_valid(self, token_id: int) -> None:
        """Raises Unauthorized, as the token check would, when the token no longer holds."""
        future = asyncio.get_running_loop().create_future()
        self._pending.setdefault(token_id, []).append(future)
        if self._running is None:
            self._running = asyncio.ensure_future(self._check_batch())
        refusal = await future
        if refusal is not None:
            raise refusal

    async def _check_batch(self) -> None:
        await asyncio.sleep(JOIN_S)  # the polls woken by the same change join before the query
        batch, self._pending, self._running = self._pending, {}, None
        try:
            refused = await run_in_threadpool(_refusals, list(batch))
        except Exception as error:  # the database is away: every poll of the batch fails with it
            for futures in batch.values():
                for future in futures:
                    if not future.done():
                        future.set_exception(error)
            return
        for token_id, futures in batch.items():
            for future in futures:
                if not future.done():
                    future.set_result(refused.get(token_id))


def _refusals(token_ids: list[int]) -> dict[int, Unauthorized]:
    TOKEN_RECHECKS.inc()
    with plain_transaction() as session:
        return tokens.refusals_by_id(session, token_ids)
