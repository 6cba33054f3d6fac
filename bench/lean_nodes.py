"""Simulated nodes that cost their host little: one keep-alive connection each, on a bare asyncio
protocol, sending a prepared long-poll and parsing only what a node needs of the answer (status,
ETag, the body's length) before it reads the whole body as JSON, as a node does.

At 10,000 nodes on the same two cores as the registries, an HTTP client library's own work per
answer (aiohttp's: about as much CPU as a replica spends on it) would be measured as the
registries' latency. Real nodes run on their own machines; the benchmark reports what these
simulated ones still cost beside the replicas' figures.
"""

from __future__ import annotations

import asyncio
import json
import time
from urllib.parse import urlsplit

HEADERS_END = b"\r\n\r\n"


class LeanFleet:
    """N nodes, each long-polling `path` on its own connection and recording when it read each
    generation; the same face as bench.propagation.Fleet."""

    def __init__(self, url: str, token: str, nodes: int, path: str, wait_s: int = 60) -> None:
        address = urlsplit(url)
        self.host, self.port, self.nodes = address.hostname or "127.0.0.1", address.port or 80, nodes
        self.request = (f"GET {path}?wait={wait_s} HTTP/1.1\r\nHost: {address.netloc}\r\n"
                        f"Authorization: Bearer {token}\r\n").encode()
        self.seen: list[dict[int, float]] = [{} for _ in range(nodes)]
        self.parked = 0
        self.errors: list[str] = []
        self.stopping = False

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        connections = []
        for index in range(self.nodes):
            transport, _ = await loop.create_connection(lambda i=index: _Node(self, i), self.host, self.port)
            connections.append(transport)
        await stop.wait()
        self.stopping = True
        for transport in connections:
            transport.close()
        if self.errors:
            raise RuntimeError(f"{len(self.errors)} simulated nodes failed, first: {self.errors[0]}")

    def latencies(self, generation: int, since: float) -> list[float] | None:
        found = [seen.get(generation) for seen in self.seen]
        return None if None in found else [t - since for t in found]  # type: ignore[operator]


class _Node(asyncio.Protocol):
    def __init__(self, fleet: LeanFleet, index: int) -> None:
        self.fleet, self.index = fleet, index
        self.buffer = b""
        self.etag: bytes | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._poll()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.fleet.stopping:
            self.fleet.errors.append(f"node {self.index}: the registry closed the connection ({exc})")

    def _poll(self) -> None:
        condition = b"If-None-Match: " + self.etag + b"\r\n" if self.etag else b""
        assert self.transport is not None
        self.transport.write(self.fleet.request + condition + b"\r\n")
        self.fleet.parked += 1

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(HEADERS_END)
        if end < 0:
            return
        head = self.buffer[:end].split(b"\r\n")
        status = int(head[0][9:12])
        fields = dict(line.split(b": ", 1) for line in head[1:])
        fields = {name.lower(): value for name, value in fields.items()}
        length = int(fields.get(b"content-length", b"0"))
        if len(self.buffer) < end + 4 + length:
            return  # the rest of the body is on its way
        body, self.buffer = self.buffer[end + 4:end + 4 + length], self.buffer[end + 4 + length:]
        self.fleet.parked -= 1
        if status == 200:
            json.loads(body)  # a node reads the whole set
            self.etag = fields[b"etag"]
            self.fleet.seen[self.index][int(self.etag.strip(b'"'))] = time.monotonic()
        elif status != 304:
            self.fleet.errors.append(f"node {self.index}: HTTP {status}: {body[:200]!r}")
            return
        self._poll()
