"""Waiting costs the other requests nothing: a request for a name no node holds yet waits for
one without holding an admission slot, and a client that hangs up while its request waits in line
takes the request out of the line, so it never reaches a node; one that hangs up while a node
works for it cancels the node's request.

The router's ASGI app runs in the test's event loop, with its parts as the router assembles them;
the node is a small HTTP server that holds its answers until released, which vLLM cannot do on
demand."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time

import aiohttp

from serving.router.admission import Admission
from serving.router.app import RouterApp
from serving.router.app_keys import App, AppKeys
from serving.router.catalog import Catalog
from serving.router.fleet import Fleet
from serving.router.forward import Forwarder
from tests.serving.router.agreeing_engines import follow
from tests.serving.router.stand_in_node import StandInNode
from tests.support.until import until

KEY = "Bearer lpt_" + "k" * 43
NAMES = ("acme/chat@1", "acme/new@1")


def make_app(http: aiohttp.ClientSession, fleet: Fleet, *, load_wait_s: float) -> RouterApp:
    keys = AppKeys("http://127.0.0.1:9", ttl_s=3600)  # the key is known below: no registry asked
    keys._apps[hashlib.sha256(KEY.encode()).digest()] = (App("app", "acme", "interactive"), time.monotonic())
    app = RouterApp("pool", keys, Admission(max_inflight=1, batch_max_inflight=1, queue_timeout_s=10),
                    Forwarder(fleet, http, cooldown_s=5, load_wait_s=load_wait_s, retry_after_s=1),
                    max_body_bytes=1 << 20, retry_after_s=1)
    app.catalog = Catalog.from_active_set("pool", 1, [
        {"tenant": "acme", "adapter": name.split("/")[1].split("@")[0], "served_name": name,
         "aliases": [{"alias": "production", "weight": 100}], "retiring": False} for name in NAMES])
    return app


def fleet_serving(node: StandInNode, *names: str) -> Fleet:
    fleet = Fleet(spill_outstanding=8)
    report(fleet, node, *names)
    return fleet


def report(fleet: Fleet, node: StandInNode, *names: str) -> None:
    follow(fleet, [{"node_id": "n1", "vllm_url": node.url, "stale": False,
                   "limits": {"max_cpu_loras": 4}, "serving": list(names)}])


class Client:
    """One request to the app; `hang_up()` makes it disconnect."""

    def __init__(self, app: RouterApp, model: str) -> None:
        body = json.dumps({"model": model, "prompt": "hi"}).encode()
        self.scope = {"type": "http", "path": "/v1/completions", "method": "POST",
                      "headers": [(b"authorization", KEY.encode())]}
        self.messages = [{"type": "http.request", "body": body, "more_body": False}]
        self.gone, self.sent = asyncio.Event(), []
        self.task = asyncio.create_task(app(self.scope, self._receive, self._send))

    async def _receive(self) -> dict:
        if self.messages:
            return self.messages.pop()
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: dict) -> None:
        self.sent.append(message)

    def hang_up(self) -> None:
        self.gone.set()

    async def status(self) -> int:
        await self.task
        return self.sent[0]["status"]


def test_a_client_that_hangs_up_while_in_line_never_reaches_a_node():
    async def scenario() -> None:
        async with StandInNode() as node, aiohttp.ClientSession() as http:
            app = make_app(http, fleet_serving(node, *NAMES), load_wait_s=0)
            node.release.clear()  # the node holds its answers
            first = Client(app, "acme/chat")
            await until(lambda: node.received == 1)
            second = Client(app, "acme/chat")  # the only slot is taken: it waits in line
            await until(lambda: len(app.admission.waiting["interactive"]) == 1)

            second.hang_up()
            await asyncio.wait_for(second.task, 5)
            assert second.sent == [] and not app.admission.waiting["interactive"]
            node.release.set()
            assert await first.status() == 200
            assert node.received == 1  # the second request was never forwarded
            assert second.task.cancelling() == 0  # the hang-up's cancellation was taken back
            assert app.admission.inflight == {"interactive": 0, "batch": 0} and not app.admission.by_tenant

    asyncio.run(asyncio.wait_for(scenario(), 20))


def test_a_request_waiting_for_a_node_to_load_its_name_holds_no_slot():
    async def scenario() -> None:
        async with StandInNode() as node, aiohttp.ClientSession() as http:
            fleet = fleet_serving(node, "acme/chat@1")  # acme/new@1 is loaded nowhere yet
            app = make_app(http, fleet, load_wait_s=10)
            waiting = Client(app, "acme/new")
            # Past its key check and counted for its tenant: from there it waits for a holder.
            await until(lambda: app.admission.by_tenant["acme"] == 1, what="the request to wait")
            assert not waiting.task.done() and node.received == 0

            assert await asyncio.wait_for(Client(app, "acme/chat").status(), 5) == 200  # not held back
            report(fleet, node, *NAMES)  # the node has loaded it
            assert await asyncio.wait_for(waiting.status(), 5) == 200
            assert node.received == 2

    asyncio.run(asyncio.wait_for(scenario(), 20))


def test_a_client_that_hangs_up_while_a_node_works_cancels_the_node_request():
    async def scenario() -> None:
        async with StandInNode() as node, aiohttp.ClientSession() as http:
            fleet = fleet_serving(node, *NAMES)
            app = make_app(http, fleet, load_wait_s=0)
            node.release.clear()
            client = Client(app, "acme/chat")
            await until(lambda: node.received == 1)
            client.hang_up()
            await asyncio.wait_for(client.task, 5)
            assert client.sent == [] and client.task.cancelling() == 0  # no cancellation left over
            assert fleet.nodes["n1"].outstanding == 0 and app.admission.inflight["interactive"] == 0
            assert not app.admission.by_tenant

    asyncio.run(asyncio.wait_for(scenario(), 20))
