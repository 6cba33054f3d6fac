"""How long a client may take to send an upload's body.

An upload holds a slot (upload_slots) and a spool file while its body arrives, so a client that
sends headers and then nothing, or a byte now and then, would hold them for as long as it keeps
the socket open: a few such sockets shut every other tenant out. Each read of the body has to
arrive within LORAPLANE_UPLOAD_IDLE_TIMEOUT_S, and after that long the body has to keep arriving
at LORAPLANE_UPLOAD_MIN_BYTES_PER_S on average. Past either bound the answer is 408, the
connection is closed, and the slot and the spool file are freed.

Only the time spent waiting for the client counts: while the registry itself is busy (hashing,
streaming parts to the store) the client is not to blame.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterable, AsyncIterator

from registry.errors import LoraplaneError
from registry.settings import RegistrySettings, get_settings

SEND_HINT = "Upload again over a steadier connection (loraplane push sends the whole body at once)."


class UploadTimedOut(LoraplaneError):
    status, code = 408, "upload_timeout"
    # The rest of the body is never read, so the connection cannot carry another request.
    headers = {"Connection": "close"}


def receive_timing() -> RegistrySettings:
    """The registry's settings, which hold upload_idle_timeout_s and upload_min_bytes_per_s."""
    return get_settings()


class TimedBody:
    """An upload body, chunk by chunk, each read bounded by the idle timeout and the minimum rate."""

    def __init__(self, chunks: AsyncIterable[bytes], timing: RegistrySettings) -> None:
        self.chunks: AsyncIterator[bytes] = chunks.__aiter__()
        self.idle_s, self.min_rate = timing.upload_idle_timeout_s, timing.upload_min_bytes_per_s
        self.waited = 0.0  # seconds spent waiting for the client
        self.received = 0
        self.first: bytes | None = None

    async def first_bytes(self) -> None:
        """Wait, under the same bounds, until the body begins (or turns out to be empty)."""
        if self.first is None:
            self.first = await self._next() or b""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self.first:
            yield self.first
        self.first = b""
        while (chunk := await self._next()) is not None:
            yield chunk

    async def _next(self) -> bytes | None:
        wait_s, by_rate = self._allowed_wait()
        started = time.monotonic()
        try:
            async with asyncio.timeout(wait_s):
                chunk = await anext(self.chunks, None)
        except TimeoutError:
            self.waited += time.monotonic() - started
            raise (self._too_slow() if by_rate else self._idle()) from None
        self.waited += time.monotonic() - started
        self.received += len(chunk or b"")
        return chunk

    def _allowed_wait(self) -> tuple[float, bool]:
        """How long the next read may take, and whether the minimum rate (not idleness) sets it."""
        if not self.min_rate:
            return self.idle_s, False
        # The body must have reached min_rate * (waited - idle_s) bytes at any moment.
        by_rate = self.idle_s + self.received / self.min_rate - self.waited
        return (by_rate, True) if by_rate < self.idle_s else (self.idle_s, False)

    def _idle(self) -> UploadTimedOut:
        return UploadTimedOut(
            f"the upload sent nothing for {self.idle_s:g} s after {self.received} bytes of its body; "
            "the registry stops waiting after LORAPLANE_UPLOAD_IDLE_TIMEOUT_S", hint=SEND_HINT)

    def _too_slow(self) -> UploadTimedOut:
        rate = self.received / self.waited if self.waited else 0.0
        return UploadTimedOut(
            f"the upload arrived at {rate:.0f} bytes/s over {self.waited:.0f} s, below the minimum "
            f"of {self.min_rate} bytes/s (LORAPLANE_UPLOAD_MIN_BYTES_PER_S)", hint=SEND_HINT)
