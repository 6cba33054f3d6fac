"""A small HTTP server in the test's own event loop, standing in for a node's vLLM where a test
needs what a real one cannot do on demand: hold an answer open until released, or take a request
and never answer. It counts the requests that reached it."""

from __future__ import annotations

import asyncio
import json

ANSWER = json.dumps({"model": "acme/chat@1", "choices": [{"text": "ok"}]}).encode()


class StandInNode:
    def __init__(self, *, answers: bool = True) -> None:
        self.answers = answers
        self.received = 0
        self.release = asyncio.Event()  # set it to let held answers go
        self.release.set()
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> "StandInNode":
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc) -> None:
        self.release.set()
        self._server.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await read_request(reader):
                self.received += 1
                if not self.answers:
                    await asyncio.Event().wait()  # took the request; never answers
                await self.release.wait()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(ANSWER), ANSWER))
                await writer.drain()
        finally:
            writer.close()


async def read_request(reader: asyncio.StreamReader) -> bool:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return False
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    await reader.readexactly(length)
    return True
