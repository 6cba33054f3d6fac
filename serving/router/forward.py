"""Send a resolved request to a node and pass its answer through, streaming included.

A node that fails before the first byte of its answer (refused or timed-out connection, reset, or
a 404 because it no longer holds the name) is skipped and the request tried on another holder.
A version no node holds, in a pool that loads on demand, is sent cold to at most MAX_COLD_TRIES
nodes (fleet.choose_cold); when none could load it (its resolver answered no adapter: the
registry or the store away, say) the client gets a 503 with Retry-After, never another answer.
Before a cold send the node's engine is asked what it holds (engines.py): an engine that lists the
name loaded from anywhere but the version's digest folder (someone who reached vLLM's port and
loaded an adapter under that name) is not sent the prompt.
A node that took the request but did not answer within `upstream_timeout_s` is not: the request
gets a 504, since sending it again would double the work on a pool that is already slow. Once a
byte has reached the client nothing is retried: the client sees the stream end.

What went wrong on a node is logged with its detail; the client is told only node ids and a
fixed reason, never node addresses or a node's own error text."""

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
from serving.router.engines import EngineCheck
from serving.router.errors import RouterError
from serving.router.fleet import Fleet, Node
from serving.router.windows import WindowMeter

log = logging.getLogger("loraplane.router")
JSON_HEADERS = {"Content-Type": "application/json"}
STALE_CONNECTION_RETRIES = 2
RETRIABLE_STATUS = (404, 502, 503)  # 404: the node lost the name since its last report
MAX_COLD_TRIES = 2


class NodeFailed(Exception):
    """A node failed before answering. `reason` is one of a few fixed codes, safe to show a
    client and to use as a metric label; `detail` is for the log only."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


class Forwarder:
    def __init__(self, fleet: Fleet, http: aiohttp.ClientSession, *, cooldown_s: float,
                 load_wait_s: float, retry_after_s: int, serial_wait_s: float = 30,
                 windows: WindowMeter | None = None, engines: EngineCheck | None = None) -> None:
        """`engines`: asked before each cold send; None only where no engine runs (tests)."""
        self.fleet, self.http, self.engines = fleet, http, engines
        self.windows = windows or WindowMeter()
        self.cooldown_s, self.load_wait_s, self.retry_after_s = cooldown_s, load_wait_s, retry_after_s
        self.serial_wait_s = serial_wait_s

    async def forward(self, target: Target, path: str, data: bytes, send: Send, *,
                      serial: bool) -> bytes | None:
        """Returns the answer's body when it was a whole JSON answer with status 200."""
        tried: set[str] = set()
        failures: list[str] = []
        cold_tries = 0
        while (choice := self._choose(target, tried, serial, cold_tries)) is not None:
            node, cold = choice
            tried.add(node.node_id)
            cold_tries += cold
            if not node.touch(target.served_name):
                metrics.MISSES.labels(target.served_name, node.node_id).inc()
            node.outstanding += 1
            try:
                if cold:
                    await self._check_cold(node, target.served_name)
                async with self._one_at_a_time(node) if serial else contextlib.nullcontext():
                    return await self._attempt(node, target, path, data, send, cold=cold)
            except NodeFailed as failure:
                log.warning("node %s failed before answering %s%s: %s", node.node_id,
                            target.served_name, " (cold)" * cold, failure)
                failures.append(f"{node.node_id} ({failure.reason})")
                metrics.RETRIES.labels(node.node_id, failure.reason).inc()
                if cold:
                    metrics.COLD_REQUESTS.labels(node.node_id, failure.reason).inc()
            finally:
                node.outstanding -= 1
        raise self._nowhere(target, failures, cold_tries)

    def _choose(self, target: Target, tried: set[str], serial: bool, cold_tries: int) -> tuple[Node, bool] | None:
        """(node, whether it is sent cold). A holder first, and for a prompt-logprob request
        one that is not busy with another, if any; then, in a pool that loads on demand, a
        node that will load it."""
        if serial:
            busy = {n.node_id for n in self.fleet.nodes.values() if n.prompt_logprobs.locked()}
            if (free := self.fleet.choose(target.served_name, tried | busy)) is not None:
                return free, False
        if (holder := self.fleet.choose(target.served_name, tried)) is not None:
            return holder, False
        if cold_tries < MAX_COLD_TRIES and (cold := self.fleet.choose_cold(target.served_name, tried)) is not None:
            return cold, True
        return None

    async def wait_for_holder(self, target: Target) -> None:
        """A name just promoted is known before its nodes report it loaded: wait a little for
        one that does. Called before the request takes an admission slot, so that waiting
        here does not hold back requests that could go now."""
        deadline = time.monotonic() + self.load_wait_s
        while self.fleet.choose(target.served_name) is None and self.fleet.choose_cold(target.served_name) is None \
                and (left := deadline - time.monotonic()) > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):  # unlike wait_for, never drops a cancellation
                    await self.fleet.changed()

    @contextlib.asynccontextmanager
    async def _one_at_a_time(self, node: Node):
        try:
            async with asyncio.timeout(self.serial_wait_s):
                await node.prompt_logprobs.acquire()
        except TimeoutError:
            raise RouterError(503, "overloaded", f"prompt-logprob requests go to a node one at a "
                              f"time, and none finished within {self.serial_wait_s:g} s",
                              "Retry later, or send fewer prompt-logprob requests at once.",
                              retry_after_s=self.retry_after_s) from None
        try:
            yield
        finally:
            node.prompt_logprobs.release()

    async def _check_cold(self, node: Node, served_name: str) -> None:
        """The node's engine, asked now, holds no other adapter under `served_name`."""
        if self.engines is None:
            return
        holdings = await self.engines.holdings(node.url)
        if holdings is None:
            raise NodeFailed("engine_unreadable", "its engine could not be asked what it holds")
        held = holdings.get(served_name)
        if held is not None and held != self.fleet.digests.get(served_name):
            metrics.ENGINE_CHECKS.labels(node.node_id, "refuted").inc()
            log.error("node %s's engine holds %s loaded from a folder that is not its digest's (%s): "
                      "no prompt for it goes there", node.node_id, served_name, held[:80])
            raise NodeFailed("refuted", f"{served_name} is loaded from {held[:80]!r}")

    def _nowhere(self, target: Target, failures: list[str], cold_tries: int) -> RouterError:
        if cold_tries:
            return RouterError(503, "adapter_unavailable", f"{target.served_name} is approved but no "
                               f"node could load it on demand now: {', '.join(failures)}",
                               "Retry after the Retry-After seconds; the node's log says why (its "
                               "registry or artifact store may be unreachable).",
                               retry_after_s=self.retry_after_s)
        if failures:
            return RouterError(503, "nodes_failed", f"every node holding {target.served_name} failed "
                               f"before answering: {', '.join(failures)}", "Retry shortly.",
                               retry_after_s=self.retry_after_s)
        return RouterError(503, "adapter_not_loaded", f"{target.served_name} is approved but not "
                           "loaded on any node yet", "Retry after the Retry-After seconds; the "
                           "pool's nodes load it on their own.", retry_after_s=self.retry_after_s)

    async def fetch(self, served_name: str, path: str, data: bytes) -> tuple[int, bytes]:
        """One request to a node holding `served_name`, its answer kept rather than relayed, and
        not counted as the name's traffic (a shadow request). (0, b"") when no node answered."""
        node = self.fleet.choose(served_name)
        if node is None:
            return 0, b""
        try:
            async with await self._post(node, path, data) as upstream:
                return upstream.status, await upstream.read()
        except (NodeFailed, RouterError, aiohttp.ClientError, TimeoutError):
            return 0, b""

    async def _attempt(self, node: Node, target: Target, path: str, data: bytes, send: Send, *,
                       cold: bool = False) -> bytes | None:
        started = time.perf_counter()
        upstream = await self._post(node, path, data)
        async with upstream:
            if upstream.status in RETRIABLE_STATUS:
                body = await _read_quietly(upstream)
                if upstream.status == 404 and cold:  # its resolver gave vLLM no adapter
                    raise NodeFailed("not_resolved", repr(body[:200]))
                if upstream.status == 404:
                    node.lost(target.served_name)
                raise NodeFailed(f"status_{upstream.status}", repr(body[:200]))
            streaming = upstream.content_type == "text/event-stream"
            try:
                first = await (upstream.content.readany() if streaming else upstream.read())
            except TimeoutError as error:
                raise self._timed_out(node) from error
            except aiohttp.ClientError as error:
                self.fleet.mark_down(node, self.cooldown_s)
                raise NodeFailed("answer_broken", f"{type(error).__name__}: {error}") from error
            ttft = time.perf_counter() - started
            await send({"type": "http.response.start", "status": upstream.status,
                        "headers": _headers(upstream, target, node, None if streaming else len(first), cold)})
            labels = (target.served_name, target.alias)
            if streaming:
                try:
                    events = await _relay_stream(upstream, first, send)
                except (aiohttp.ClientError, TimeoutError):
                    self.windows.failed(*labels, 0)  # the answer broke off
                    raise
                completion = max(0, events - 1)  # minus [DONE]
                metrics.TOKENS.labels(*labels, "completion").inc(completion)
            else:
                await send({"type": "http.response.body", "body": first})
                completion = _count_usage(first, labels, upstream.status)
        latency = time.perf_counter() - started
        metrics.REQUESTS.labels(*labels, node.node_id, str(upstream.status)).inc()
        metrics.TTFT.labels(*labels).observe(ttft)
        metrics.LATENCY.labels(*labels).observe(latency)
        if cold:
            metrics.COLD_REQUESTS.labels(node.node_id, "answered").inc()
        if upstream.status == 200:
            metrics.RESIDENCY_TTFT.labels("cold" if cold else "resident").observe(ttft)
        self.windows.answered(*labels, upstream.status, ttft, latency, completion, cold=cold)
        return first if not streaming and upstream.status == 200 else None

    async def _post(self, node: Node, path: str, data: bytes) -> aiohttp.ClientResponse:
        url = node.url + path
        try:
            for _ in range(STALE_CONNECTION_RETRIES):
                try:
                    return await self.http.post(url, data=data, headers=JSON_HEADERS)
                except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError):
                    raise  # refused, unreachable or silent: the node is down
                except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
                    # A kept-alive connection the node had just closed: again, on another one.
                    metrics.RETRIES.labels(node.node_id, "stale_connection").inc()
            return await self.http.post(url, data=data, headers=JSON_HEADERS)
        except aiohttp.ConnectionTimeoutError as error:
            self.fleet.mark_down(node, self.cooldown_s)
            raise NodeFailed("connect_failed", f"{type(error).__name__}: {error}") from error
        except TimeoutError as error:  # sent, but no answer in time
            raise self._timed_out(node) from error
        except aiohttp.ClientError as error:
            self.fleet.mark_down(node, self.cooldown_s)
            reason = "connect_failed" if isinstance(error, aiohttp.ClientConnectorError) else "connection_lost"
            raise NodeFailed(reason, f"{type(error).__name__}: {error}") from error

    def _timed_out(self, node: Node) -> RouterError:
        limit = self.http.timeout.total
        within = f"within {limit:g} s" if limit else "in time"
        log.warning("node %s did not answer %s", node.node_id, within)
        return RouterError(504, "upstream_timeout", f"the node did not answer {within}",
                           "Ask for fewer tokens, or retry when the pool is less busy.")


async def _relay_stream(upstream: aiohttp.ClientResponse, first: bytes, send: Send) -> int:
    events, chunk = 0, first
    while chunk:
        events += chunk.count(b"data: ")
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
        chunk = await upstream.content.readany()
    await send({"type": "http.response.body", "body": b""})
    return events


def _headers(upstream: aiohttp.ClientResponse, target: Target, node: Node,
             length: int | None, cold: bool) -> list[tuple[bytes, bytes]]:
    headers = [(b"content-type", upstream.headers.get("Content-Type", "application/json").encode()),
               (b"x-loraplane-served-name", target.served_name.encode()),
               (b"x-loraplane-node", node.node_id.encode()),
               # cold: the node did not hold the version and loaded it for this request
               (b"x-loraplane-residency", b"cold" if cold else b"resident")]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    else:
        headers.append((b"cache-control", b"no-cache"))
    return headers


def _count_usage(body: bytes, labels: tuple[str, str], status: int) -> int:
    """Count the answer's tokens; returns its completion tokens."""
    if status != 200:
        return 0
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        usage = json.loads(body).get("usage") or {}
        completion = int(usage.get("completion_tokens", 0))
        metrics.TOKENS.labels(*labels, "prompt").inc(usage.get("prompt_tokens", 0))
        metrics.TOKENS.labels(*labels, "completion").inc(completion)
        return completion
    return 0


async def _read_quietly(upstream: aiohttp.ClientResponse) -> bytes:
    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
        return await upstream.content.read(2000)
    return b""
