"""A TCP link to a server that a test can cut and restore, for a store that goes away without
stopping the session's own (other modules share it): the registry presigns its download URLs
through the link (LORAPLANE_S3_PRESIGN_ENDPOINT_URL), so cutting it takes the store away from the
nodes only."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from urllib.parse import urlsplit

from devkit.services import free_port


class StoreLink:
    def __init__(self, target_url: str) -> None:
        target = urlsplit(target_url)
        self.target = (target.hostname or "127.0.0.1", target.port or 80)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self.restore()

    def restore(self) -> None:
        self._call(self._listen())

    def cut(self) -> None:
        """Refuse new connections and drop those open, as a store that went away."""
        self._call(self._close())

    def close(self) -> None:
        self.cut()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def _call(self, work) -> None:
        asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout=10)

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(self._forward, "127.0.0.1", self.port)

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._open):
            writer.close()

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._open |= {writer, upstream_writer}
        await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))
        self._open -= {writer, upstream_writer}


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, ConnectionError):
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    writer.close()
