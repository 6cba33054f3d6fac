"""Send a resolved request to a node and pass its answer through, streaming included.

A node that fails before the first byte of its answer (refused connection, reset, timeout, or a
404 because it no longer holds the name) is skipped and the request tried on another holder.
Once a byte has reached the client nothing is retried: the client sees the stream end."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time

import aiohttp
from starlette.types import Send

from serving.router import metrics
from serving.router.catalog import Target
from serving.router.errors import RouterError
from serving.router.fleet import Fleet, Node

log = logging.getLogger("loraplane.router")
JSON_HEADERS = {"Content-Type": "application/json"}
STALE_CONNECTION_RETRIES = 2
RETRIABLE_STATUS = (404, 502, 503)  # 404: the node lost the name since its last report


class NodeFailed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Forwarder:
    def __init__(self, fleet: Fleet, http: aiohttp.ClientSession, *, cooldown_s: float,
                 load_wait_s: float, retry_after_s: int) -> None:
        self.fleet, self.http = fleet, http
        self.cooldown_s, self.load_wait_s, self.retry_after_s = cooldown_s, load_wait_s, retry_after_s

    async def forward(self, target: Target, path: str, data: bytes, send: Send, *,
                      serial: bool) -> None:
        tried: set[str] = set()
        failures: list[str] = []
        while True:
            node = self.fleet.choose(target.served_name, tried)
            if node is None and not tried:
                node = await self._wait_for_holder(target)
            if node is None:
                raise self._nowhere(target, failures)
            tried.add(node.node_id)
            if not node.touch(target.served_name):
                metrics.MISSES.labels(target.served_name, node.node_id).inc()
            node.outstanding += 1
            try:
                async with node.prompt_logprobs if serial else contextlib.nullcontext():
                    await self._attempt(node, target, path, data, send)
                return
            except NodeFailed as failure:
                log.warning("node %s failed before answering %s: %s", node.node_id,
                            target.served_name, failure.reason)
                failures.append(f"{node.node_id}: {failure.reason}")
                metrics.RETRIES.labels(node.node_id, failure.reason.split(":")[0]).inc()
            finally:
                node.outstanding -= 1

    async def _wait_for_holder(self, target: Target) -> Node | None:
        """A name just promoted is known before its nodes report it loaded: wait a little."""
        deadline = time.monotonic() + self.load_wait_s
        while (left := deadline - time.monotonic()) > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.fleet.changed(), left)
            if (node := self.fleet.choose(target.served_name)) is not None:
                return node
        return None

    def _nowhere(self, target: Target, failures: list[str]) -> RouterError:
        if failures:
            return RouterError(503, "nodes_failed", f"every node holding {target.served_name} failed "
                               f"before answering: {'; '.join(failures)[:500]}", "Retry shortly.",
                               retry_after_s=self.retry_after_s)
        return RouterError(503, "adapter_not_loaded", f"{target.served_name} is approved but not "
                           "loaded on any node yet", "Retry after the Retry-After seconds; the "
                           "pool's nodes load it on their own.", retry_after_s=self.retry_after_s)

    async def _attempt(self, node: Node, target: Target, path: str, data: bytes, send: Send) -> None:
        started = time.perf_counter()
        upstream = await self._post(node, path, data)
        async with upstream:
            if upstream.status in RETRIABLE_STATUS:
                body = await _read_quietly(upstream)
                if upstream.status == 404:
                    node.serving = node.serving - {target.served_name}
                raise NodeFailed(f"status {upstream.status}: {body[:200]!r}")
            streaming = upstream.content_type == "text/event-stream"
            try:
                first = await (upstream.content.readany() if streaming else upstream.read())
            except (aiohttp.ClientError, TimeoutError) as error:
                self.fleet.mark_down(node, self.cooldown_s)
                raise NodeFailed(f"first byte: {type(error).__name__}") from error
            ttft = time.perf_counter() - started
            await send({"type": "http.response.start", "status": upstream.status,
                        "headers": _headers(upstream, target, node, None if streaming else len(first))})
            labels = (target.served_name, target.alias)
            if streaming:
                events = await _relay_stream(upstream, first, send)
                metrics.TOKENS.labels(*labels, "completion").inc(max(0, events - 1))  # minus [DONE]
            else:
                await send({"type": "http.response.body", "body": first})
                _count_usage(first, labels, upstream.status)
        metrics.REQUESTS.labels(*labels, node.node_id, str(upstream.status)).inc()
        metrics.TTFT.labels(*labels).observe(ttft)
        metrics.LATENCY.labels(*labels).observe(time.perf_counter() - started)

    async def _post(self, node: Node, path: str, data: bytes) -> aiohttp.ClientResponse:
        url = node.url + path
        try:
            for _ in range(STALE_CONNECTION_RETRIES):
                try:
                    return await self.http.post(url, data=data, headers=JSON_HEADERS)
                except aiohttp.ClientConnectorError:
                    raise  # refused or unreachable: the node is down
                except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
                    # A kept-alive connection the node had just closed: again, on another one.
                    metrics.RETRIES.labels(node.node_id, "stale_connection").inc()
            return await self.http.post(url, data=data, headers=JSON_HEADERS)
        except (aiohttp.ClientError, TimeoutError) as error:
            self.fleet.mark_down(node, self.cooldown_s)
            raise NodeFailed(f"connect: {type(error).__name__}: {error}"[:300]) from error


async def _relay_stream(upstream: aiohttp.ClientResponse, first: bytes, send: Send) -> int:
    events, chunk = 0, first
    while chunk:
        events += chunk.count(b"data: ")
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
        chunk = await upstream.content.readany()
    await send({"type": "http.response.body", "body": b""})
    return events


def _headers(upstream: aiohttp.ClientResponse, target: Target, node: Node,
             length: int | None) -> list[tuple[bytes, bytes]]:
    headers = [(b"content-type", upstream.headers.get("Content-Type", "application/json").encode()),
               (b"x-loraplane-served-name", target.served_name.encode()),
               (b"x-loraplane-node", node.node_id.encode())]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    else:
        headers.append((b"cache-control", b"no-cache"))
    return headers


def _count_usage(body: bytes, labels: tuple[str, str], status: int) -> None:
    if status != 200:
        return
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        usage = json.loads(body).get("usage") or {}
        metrics.TOKENS.labels(*labels, "prompt").inc(usage.get("prompt_tokens", 0))
        metrics.TOKENS.labels(*labels, "completion").inc(usage.get("completion_tokens", 0))


async def _read_quietly(upstream: aiohttp.ClientResponse) -> bytes:
    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
        return await upstream.content.read(2000)
    return b""
