"""The router's ASGI app: POST /v1/completions and /v1/chat/completions (streaming passed
through), GET /v1/models, GET /healthz. Plain ASGI, because every microsecond here is added to
every request; the routing decisions live in catalog, fleet and admission."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable

from starlette.types import Receive, Scope, Send

from serving.router import metrics
from serving.router.admission import Admission
from serving.router.app_keys import AppKeys
from serving.router.catalog import Catalog, Target
from serving.router.errors import RouterError
from serving.router.forward import Forwarder
from serving.router.requests import check_fields, header, json_body, tier_of, wants_prompt_logprobs
from serving.router.shadow import Shadow
from serving.router.traffic import TrafficMeter

log = logging.getLogger("loraplane.router")
PROXIED = ("/v1/completions", "/v1/chat/completions")
ROUTES = "POST /v1/completions, POST /v1/chat/completions, GET /v1/models and GET /healthz"


class RouterApp:
    def __init__(self, pool: str, keys: AppKeys, admission: Admission, forwarder: Forwarder,
                 max_body_bytes: int, retry_after_s: int, traffic: TrafficMeter | None = None) -> None:
        self.pool, self.keys, self.admission, self.forwarder = pool, keys, admission, forwarder
        self.max_body_bytes, self.retry_after_s = max_body_bytes, retry_after_s
        self.traffic = traffic or TrafficMeter()
        self.catalog = Catalog(pool)  # replaced whole on each active set
        self.shadow = Shadow(forwarder)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        response = _Response(send)
        try:
            if path in PROXIED:
                _allow(method, "POST")
                await self._proxy(scope, receive, response, path)
            elif path == "/v1/models":
                _allow(method, "GET")
                await self._models(scope, response)
            elif path == "/healthz":
                await self._health(response)
            else:
                raise RouterError(404, "no_such_route", f"no route {path[:100]!r}", f"The router serves {ROUTES}.")
        except RouterError as error:
            metrics.ERRORS.labels(error.served_name, error.code).inc()
            if error.served_name and error.status >= 500:  # the version's request went wrong
                self.forwarder.windows.failed(error.served_name, error.alias, error.status)
            if error.status >= 500:
                log.warning("%d %s: %s", error.status, error.code, error.message)
            if not response.started:
                await _json(send, error.status, error.body(), error.headers())
        except Exception:  # a broken node stream or a bug: the client sees the stream end
            metrics.ERRORS.labels("", "internal" if not response.started else "stream_broken").inc()
            if not response.started:
                log.exception("request failed")
                failure = RouterError(500, "internal", "the router failed to handle this request",
                                      "Retry; if it persists, see the router's log.")
                await _json(send, 500, failure.body(), failure.headers())

    async def _proxy(self, scope: Scope, receive: Receive, send: _Response, path: str) -> None:
        app = await self.keys.authenticate(header(scope, b"authorization"))
        tier = tier_of(app, scope)
        payload = await json_body(scope, receive, self.max_body_bytes)
        check_fields(payload)
        self._require_ready()
        target = self.catalog.resolve(payload.get("model"), app.tenant)
        self.traffic.record(target.served_name)
        payload["model"] = target.served_name
        data, serial = json.dumps(payload).encode(), wants_prompt_logprobs(payload)
        with self.admission.tenant_share(app.tenant):
            try:
                answer = await _unless_disconnected(receive, send, self._admit_and_forward(
                    target, tier, path, data, send, serial))
            except RouterError as error:
                error.served_name, error.alias = target.served_name, target.alias
                raise
        if target.shadow_of and answer is not None:
            self.shadow.compare_later(target, path, payload, answer)

    async def _admit_and_forward(self, target: Target, tier: str, path: str, data: bytes,
                                 send: Send, serial: bool) -> bytes | None:
        await self.forwarder.wait_for_holder(target)
        queued = time.perf_counter()
        async with self.admission.slot(tier):
            metrics.QUEUED.labels(tier).observe(time.perf_counter() - queued)
            metrics.INFLIGHT.labels(tier).inc()
            try:
                return await self.forwarder.forward(target, path, data, send, serial=serial)
            finally:
                metrics.INFLIGHT.labels(tier).dec()

    async def _models(self, scope: Scope, send: Send) -> None:
        app = await self.keys.authenticate(header(scope, b"authorization"))
        self._require_ready()
        data = [{"id": name, "object": "model", "created": 0, "owned_by": app.tenant}
                for name in self.catalog.names_for(app.tenant)]
        await _json(send, 200, json.dumps({"object": "list", "data": data}).encode())

    async def _health(self, send: Send) -> None:
        ready = self.catalog.generation >= 0
        body = {"ready": ready, "pool": self.pool, "generation": self.catalog.generation}
        await _json(send, 200 if ready else 503, json.dumps(body).encode())

    def _require_ready(self) -> None:
        if self.catalog.generation < 0:
            raise RouterError(503, "router_starting", "the router has not read the pool's active "
                              "set yet", "Retry shortly.", retry_after_s=self.retry_after_s)


class _Response:
    """`send`, remembering whether the response has begun (after which no error page fits) and
    whether it is complete."""

    def __init__(self, send: Send) -> None:
        self._send, self.started, self.finished = send, False, False

    async def __call__(self, message) -> None:
        self.started = True
        self.finished = message["type"] == "http.response.body" and not message.get("more_body")
        await self._send(message)


async def _unless_disconnected(receive: Receive, response: _Response, work: Awaitable):
    """Await `work` in this task, cancelling it if the client hangs up before its answer is
    complete (while it waits in line, or while a node generates), so no node works for nobody."""
    handler = asyncio.current_task()
    if handler is None:  # awaited by a request's task, always
        raise RuntimeError("_unless_disconnected must run inside a task")
    hung_up = False

    async def watch() -> None:
        nonlocal hung_up
        while (await receive())["type"] != "http.disconnect":
            pass
        if not response.finished:
            hung_up = True
            handler.cancel()

    watcher = asyncio.create_task(watch())
    try:
        result = await work
    except asyncio.CancelledError:
        if not hung_up or handler.uncancel() > 0:
            raise  # cancelled for another reason too, such as shutdown
        return None
    else:
        if hung_up:  # the work finished without meeting the cancellation: take it back
            handler.uncancel()
        return result
    finally:
        watcher.cancel()


def _allow(method: str, allowed: str) -> None:
    if method != allowed:
        raise RouterError(405, "method_not_allowed", f"{method} is not allowed here", f"Use {allowed}.")


async def _json(send: Send, status: int, body: bytes,
                headers: list[tuple[bytes, bytes]] | None = None) -> None:
    headers = (headers or [(b"content-type", b"application/json")]) + [
        (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
