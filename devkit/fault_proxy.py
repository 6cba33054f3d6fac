"""A node's vLLM made to misbehave on purpose: an HTTP proxy in front of a real vLLM that passes
every request through, except that requests for the served names in `failing` get a 500 and
those in `slow` wait `delay_s` first. The agent and the router use its URL as the node's vLLM.

    with FaultProxy(vllm.url) as proxy:
        proxy.failing.add("acme/chat@3")   # from now on its requests fail

It runs its own event loop in a thread, so a test or benchmark can drive it from plain code."""

from __future__ import annotations

import asyncio
import json
import threading

from aiohttp import ClientSession, ClientTimeout, web

GENERATION_PATHS = ("/v1/completions", "/v1/chat/completions")
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding"}


class FaultProxy:
    def __init__(self, upstream: str, *, delay_s: float = 2.0) -> None:
        self.upstream, self.delay_s = upstream.rstrip("/"), delay_s
        self.failing: set[str] = set()
        self.slow: set[str] = set()
        self.failed = 0  # requests answered with a 500 on purpose
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self.url = ""

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        self._ready.wait(timeout=30)
        return self

    def __exit__(self, *_) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._proxy)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        async with ClientSession(timeout=ClientTimeout(total=600)) as self._http:
            self._ready.set()
            await self._stop.wait()
        await runner.cleanup()

    async def _proxy(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if request.method == "POST" and request.path in GENERATION_PATHS:
            model = _model_of(body)
            if model in self.slow:
                await asyncio.sleep(self.delay_s)
            if model in self.failing:
                self.failed += 1
                return web.json_response({"error": {"message": "injected fault", "type": "server_error",
                                                     "code": 500}}, status=500)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP | {"host"}}
        async with self._http.request(request.method, self.upstream + request.path_qs, data=body,
                                      headers=headers) as upstream:
            answer = web.StreamResponse(status=upstream.status, headers={
                k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP})
            await answer.prepare(request)
            async for chunk in upstream.content.iter_any():
                await answer.write(chunk)
            await answer.write_eof()
            return answer


def _model_of(body: bytes) -> str | None:
    try:
        return json.loads(body).get("model")
    except (ValueError, AttributeError):
        return None
