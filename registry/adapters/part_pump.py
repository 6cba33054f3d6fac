"""Feed a BlobWriter from a spool file that is still being written."""

from __future__ import annotations

import asyncio
from pathlib import Path

from s3transfer.utils import ReadFileChunk
from starlette.concurrency import run_in_threadpool

from registry.storage.base import BlobWriter

PARTS_IN_FLIGHT = 2
READ_BYTES = 1024 * 1024


class _PartBody(ReadFileChunk):
    """A stretch of the spool file that hands out at least a MiB per read.

    http.client sends a body 16 KiB per read; a MiB per read means far fewer Python round trips
    in this process, and larger writes for the S3 server to receive.
    """

    def read(self, amount: int | None = None) -> bytes:
        return super().read(None if amount is None else max(amount, READ_BYTES))


class PartPump:
    """Sends each finished stretch of the spool file as a part, a bounded number in flight.

    Parts are read back from the spool file (the page cache), so no part is held in memory.
    """

    def __init__(self, writer: BlobWriter, spool: Path) -> None:
        self.writer, self.spool = writer, spool
        self.written = self.sent = self.number = 0
        self.in_flight: set[asyncio.Task] = set()

    async def wrote(self, size: int, file) -> None:
        self.written += size
        if self.written - self.sent >= self.writer.part_size:
            file.flush()
            await self._send(self.writer.part_size)

    async def finish(self) -> None:
        while self.written > self.sent or self.number == 0:
            await self._send(min(self.writer.part_size, self.written - self.sent))
        await self._wait(0)

    async def abort(self) -> None:
        for task in self.in_flight:
            task.cancel()
        await asyncio.gather(*self.in_flight, return_exceptions=True)
        await run_in_threadpool(self.writer.abort)

    async def _send(self, size: int) -> None:
        await self._wait(PARTS_IN_FLIGHT - 1)
        self.number += 1
        part = _PartBody.from_filename(str(self.spool), self.sent, size)
        self.sent += size
        self.in_flight.add(asyncio.create_task(run_in_threadpool(self._upload, self.number, part)))

    def _upload(self, number: int, part: _PartBody) -> None:
        with part:
            self.writer.upload_part(number, part)

    async def _wait(self, most: int) -> None:
        while len(self.in_flight) > most:
            done, self.in_flight = await asyncio.wait(self.in_flight, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # re-raise a failed part upload
