"""A small HTTP server in the test's own event loop, standing in for a node's vLLM where a test
needs what a real one cannot do on demand: hold an answer open until released, take a request
and never answer, or answer every request with a 404 (an engine whose resolver found no adapter).
It counts the requests that reached it."""

from __future__ import annotations

import asyncio
import json

ANSWER = json.dumps({"model": "acme/chat@1", "choices": [{"text": "ok"}]}).encode()
NOT_FOUND = json.dumps({"error": {"message": "The model `acme/chat@1` does not exist.", "code": 404}}).encode()


class StandInNode:
    def __init__(self, *, answers: bool = True, status: int = 200, models: list[dict] | None = None) -> None:
        """`models`: what GET /v1/models lists, as vLLM lists adapters (id, parent, root)."""
        self.answers, self.status, self.models = answers, status, models
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
            while path := await read_request(reader):
                if path == "/v1/models" and self.models is not None:
                    listing = json.dumps({"object": "list", "data": self.models}).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: %d\r\n\r\n%s" % (len(listing), listing))
                    await writer.drain()
                    continue
                self.received += 1
                if not self.answers:
                    await asyncio.Event().wait()  # took the request; never answers
                await self.release.wait()
                body, head = (ANSWER, b"200 OK") if self.status == 200 else (NOT_FOUND, b"404 Not Found")
                writer.write(b"HTTP/1.1 %s\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (head, len(body), body))
                await writer.drain()
        finally:
            writer.close()


async def read_request(reader: asyncio.StreamReader) -> str:
    """The next request's path; "" when the connection closed."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return ""
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    await reader.readexactly(length)
    return head.split(b" ", 2)[1].decode()
