"""A Kubernetes API for the router's EndpointSlice watch: kmock's emulator (no cluster runs here),
served on a loopback port that can be stopped and started again as an API server restarts; the
pool's EndpointSlices as the EndpointSlice controller writes them; and pods' engines on addresses
of their own (127.0.0.2, 127.0.0.3, ... on one port, as pods' IPs on one container port)."""

from __future__ import annotations

import asyncio
import ssl
import threading
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import RawTestServer
from kmock import KubernetesEmulator, Server, action, resource

from devkit.services import free_port

SLICES = resource("discovery.k8s.io", "v1", "endpointslices")
NAMESPACE, SERVICE = "serving", "chat-vllm"
SLICES_PATH = f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices"


class _QuickStop(RawTestServer):
    """Stops at once, dropping open watches, as an API server that goes away does (aiohttp would
    wait a minute for them to end); serves TLS when given a context."""

    context: ssl.SSLContext | None = None

    async def start_server(self, loop=None, **kwargs: Any) -> None:
        await super().start_server(loop=loop, ssl=self.context, **kwargs)

    async def _make_runner(self, **kwargs: Any):
        runner = await super()._make_runner(**kwargs)
        runner._shutdown_timeout = 0.1
        return runner


class KubeApi:
    """`tls`: a certificate for localhost and its key, served as the API's (then on
    https://localhost:port; the slices are put in `emulator.objects` directly)."""

    def __init__(self, tls: tuple[Path, Path] | None = None) -> None:
        self.emulator = KubernetesEmulator()
        self.emulator.resources["discovery.k8s.io/v1/endpointslices"].namespaced = True
        self.port = free_port()
        self._server: Server | None = None
        self._server_cls = _QuickStop
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self._server_cls = type("_QuickStopTls", (_QuickStop,), {"context": context})

    @property
    def url(self) -> str:
        scheme, host = ("https", "localhost") if self._server_cls is not _QuickStop else ("http", "127.0.0.1")
        return f"{scheme}://{host}:{self.port}"

    async def __aenter__(self) -> KubeApi:
        await self.emulator.__aenter__()
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()
        await self.emulator.__aexit__(*exc)

    async def start(self) -> None:
        self._server = Server(self.emulator, port=self.port, server_cls=self._server_cls)
        await self._server.__aenter__()

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.__aexit__(None, None, None)
            self._server = None

    async def create(self, body: dict) -> None:
        async with self.emulator.post(SLICES_PATH, json=body) as response:
            assert response.status == 200, await response.text()

    async def patch(self, name: str, body: dict) -> None:
        async with self.emulator.patch(f"{SLICES_PATH}/{name}", json=body) as response:
            assert response.status == 200, await response.text()

    async def delete(self, name: str) -> None:
        async with self.emulator.delete(f"{SLICES_PATH}/{name}") as response:
            assert response.status == 200, await response.text()

    def requests(self, *, watch: bool) -> int:
        """The requests for EndpointSlices so far: listings or watches."""
        kind = action.WATCH if watch else action.LIST
        return sum(1 for r in self.emulator if r.resource == SLICES and r.action == kind)


def endpoint(pod: str | None, address: str, *, ready: bool | None = True, terminating: bool | None = None,
             kind: str = "Pod") -> dict:
    conditions = {k: v for k, v in (("ready", ready), ("terminating", terminating)) if v is not None}
    found: dict[str, Any] = {"addresses": [address], "conditions": conditions}
    if pod is not None:
        found["targetRef"] = {"kind": kind, "name": pod, "namespace": NAMESPACE}
    return found


def endpoint_slice(name: str, *endpoints: dict, port: int = 8000, port_name: str = "vllm",
                   service: str = SERVICE, address_type: str = "IPv4") -> dict:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": NAMESPACE,
                         "labels": {"kubernetes.io/service-name": service}},
            "addressType": address_type, "ports": [{"name": port_name, "port": port, "protocol": "TCP"}],
            "endpoints": list(endpoints)}


class PodEngine:
    """A pod's engine as the router sees it: lists `held` (served name -> digest) in /v1/models as
    loaded from the agent's cache folder of that digest, and answers every completion with its own
    address, so a test sees which pod answered."""

    def __init__(self, address: str, port: int, held: dict[str, str]) -> None:
        self.address, self.port, self.held = address, port, held
        self.asked = 0  # /v1/models requests
        self.prompts = 0
        self._runner: web.AppRunner | None = None

    @property
    def answer(self) -> str:
        return f"answered by {self.address}"

    async def __aenter__(self) -> PodEngine:
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/completions", self._complete)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.address, self.port).start()
        return self

    async def __aexit__(self, *exc) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _models(self, request: web.Request) -> web.Response:
        self.asked += 1
        return web.json_response({"object": "list", "data": [
            {"id": name, "object": "model", "root": f"/var/lib/agent/cache/{digest}", "parent": "base"}
            for name, digest in self.held.items()]})

    async def _complete(self, request: web.Request) -> web.Response:
        self.prompts += 1
        body = await request.json()
        return web.json_response({"model": body["model"], "choices": [{"index": 0, "text": self.answer}]})


async def settle() -> None:
    """A few turns of the loop, for what would have happened by now (nothing, in a negative check)."""
    await asyncio.sleep(0.2)


class ApiInThread:
    """The emulated API on an event loop of its own, for tests that run the router (or a whole
    chart's pods) as processes."""

    def __enter__(self) -> ApiInThread:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.api = KubeApi()
        self.call(self.api.__aenter__())
        return self

    def __exit__(self, *exc) -> None:
        self.call(self.api.__aexit__(None, None, None))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def call(self, work):
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(10)
