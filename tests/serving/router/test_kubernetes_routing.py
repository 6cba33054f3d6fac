"""On Kubernetes (LORAPLANE_ROUTER_NODE_ADDRESSES=kubernetes) a prompt goes where the pool's
EndpointSlices say the node's pod is, never to the address in the registry's reports; and only to
a pod that both is ready and has a report, once its engine listed the adapter. When a pod's IP
changes, another engine may be behind the node's id: it is asked again before its first prompt.

The router's parts run in the test's event loop as the router assembles them, requests go through
its ASGI app and its real HTTP path to the pods' engines (small servers on 127.0.0.2 and
127.0.0.3, one port, as two pods' IPs), and the slices come from kmock's Kubernetes API emulator.
The reports are what the registry's rollout returns; their vllm_url is an impostor's."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import time

import aiohttp
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.trust_attacks.impostor import Impostor
from devkit.services import free_port, wait_until
from serving.router.admission import Admission
from serving.router.app import RouterApp
from serving.router.app_keys import App, AppKeys
from serving.router.catalog import Catalog
from serving.router.endpoint_watch import EndpointWatch, api_client
from serving.router.engines import EngineCheck
from serving.router.fleet import Fleet
from serving.router.forward import Forwarder
from tests.serving.router.kube_api import NAMESPACE, SERVICE, ApiInThread, KubeApi, PodEngine, endpoint, endpoint_slice
from tests.support.cli import LORAPLANE
from tests.support.until import until

pytestmark = pytest.mark.fast
KEY = "Bearer lpt_" + "k" * 43
NAME, DIGEST = "acme/chat@1", "c" * 64


def router_app(http: aiohttp.ClientSession, fleet: Fleet) -> RouterApp:
    keys = AppKeys("http://127.0.0.1:9", ttl_s=3600)  # the key is known below: no registry asked
    keys._apps[hashlib.sha256(KEY.encode()).digest()] = (App("app", "acme", "interactive"), time.monotonic())
    app = RouterApp("pool", keys, Admission(max_inflight=4, batch_max_inflight=1, queue_timeout_s=10),
                    Forwarder(fleet, http, cooldown_s=5, load_wait_s=0, retry_after_s=1),
                    max_body_bytes=1 << 20, retry_after_s=1)
    app.catalog = Catalog.from_active_set("pool", 1, [
        {"tenant": "acme", "adapter": "chat", "served_name": NAME, "digest": DIGEST,
         "aliases": [{"alias": "production", "weight": 100}], "retiring": False}])
    fleet.follow_active_set([{"served_name": NAME, "digest": DIGEST}])
    return app


async def ask(app: RouterApp) -> tuple[int, dict]:
    """One completion through the app, as a client sends it: (status, answer)."""
    sent: list[dict] = []
    messages = [{"type": "http.request", "body": json.dumps({"model": "acme/chat", "prompt": "hi"}).encode(),
                 "more_body": False}]

    async def receive() -> dict:
        if messages:
            return messages.pop()
        await asyncio.Event().wait()
        return {}

    async def send(message: dict) -> None:
        sent.append(message)

    await app({"type": "http", "path": "/v1/completions", "method": "POST",
               "headers": [(b"authorization", KEY.encode())]}, receive, send)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], json.loads(body)


def test_prompts_follow_the_pods_as_kubernetes_lists_them():
    async def scenario() -> None:
        port = free_port()
        with Impostor({NAME: f"/var/lib/agent/cache/{DIGEST}"}) as impostor:
            # The registry knows pod-1, pod-2 and a node no endpoint lists; each report names the
            # impostor as its address.
            reports = [{"node_id": node, "vllm_url": impostor.url, "stale": False,
                        "limits": {"max_cpu_loras": 4}, "serving": [NAME]} for node in ("pod-1", "pod-2", "ghost")]
            async with KubeApi() as api, aiohttp.ClientSession() as http, \
                    PodEngine("127.0.0.2", port, {NAME: DIGEST}) as first, \
                    PodEngine("127.0.0.3", port, {NAME: DIGEST}) as second:
                fleet = Fleet(spill_outstanding=8, addresses_from_platform=True)
                fleet.update(reports)
                app, check = router_app(http, fleet), EngineCheck(http, timeout_s=5)
                async with api_client(api.url) as client:
                    watch = EndpointWatch(client, NAMESPACE, SERVICE, "vllm", "http", fleet.locate)
                    following = asyncio.create_task(watch.run())

                    async def routed(node_ids: set[str]) -> None:
                        """The nodes the slices list, with their engines asked (as the router's
                        loop that reads reports does after a change)."""
                        await until(lambda: set(fleet.nodes) == node_ids, what=f"nodes {node_ids}")
                        await fleet.confirm(check)

                    await routed(set())  # no slice yet: the registry's word places nobody
                    assert (await ask(app))[0] == 503

                    await api.create(endpoint_slice("chat-a", endpoint("pod-1", "127.0.0.2"), port=port))
                    await routed({"pod-1"})
                    assert await ask(app) == (200, {"model": NAME, "choices": [{"index": 0, "text": first.answer}]})

                    # pod-1 comes back with another IP: its id, another engine, asked before use.
                    await api.patch("chat-a", {"endpoints": [endpoint("pod-1", "127.0.0.3")]})
                    await until(lambda: "pod-1" in fleet.nodes and "127.0.0.3" in fleet.nodes["pod-1"].url,
                                what="pod-1 at its new address")
                    assert (await ask(app))[0] == 503  # not confirmed there yet
                    assert second.asked == 0
                    await fleet.confirm(check)
                    assert second.asked == 1
                    assert (await ask(app))[1]["choices"][0]["text"] == second.answer

                    # pod-1 no longer ready; pod-2 (on 127.0.0.2 now) ready, in a second slice.
                    await api.patch("chat-a", {"endpoints": [endpoint("pod-1", "127.0.0.3", ready=False)]})
                    await api.create(endpoint_slice("chat-b", endpoint("pod-2", "127.0.0.2"), port=port))
                    await routed({"pod-2"})
                    assert (await ask(app))[1]["choices"][0]["text"] == first.answer

                    await api.delete("chat-b")
                    await routed(set())
                    assert (await ask(app))[0] == 503
                    assert (first.prompts, second.prompts) == (2, 1)
                    following.cancel()
                    await asyncio.gather(following, return_exceptions=True)
            assert impostor.prompts == []

    asyncio.run(asyncio.wait_for(scenario(), 30))


def gauge(url: str, name: str) -> float | None:
    for family in text_string_to_metric_families(httpx.get(url, timeout=5).text):
        for sample in family.samples:
            if sample.name == name:
                return sample.value
    return None


def test_the_router_process_follows_the_slices_named_in_its_settings(tmp_path):
    """`loraplane router` with LORAPLANE_ROUTER_NODE_ADDRESSES=kubernetes, as the chart runs it
    (the API at K8S_API_URL instead of a pod's own): it lists the pods, and keeps them while the API
    is away. Its registry is away all along, which holds nothing of this back."""
    metrics_port = free_port()
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    with ApiInThread() as emulated:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LORAPLANE_")}
        env.update({"LORAPLANE_ROUTER_TOKEN": "lpt_x", "LORAPLANE_ROUTER_METRICS_PORT": str(metrics_port),
                    "LORAPLANE_ROUTER_NODE_ADDRESSES": "kubernetes",
                    "LORAPLANE_ROUTER_K8S_SERVICE": f"{NAMESPACE}/{SERVICE}",
                    "LORAPLANE_ROUTER_K8S_API_URL": emulated.api.url})
        log = tmp_path / "router.log"
        router = subprocess.Popen([LORAPLANE, "router", "--pool", "chat", "--registry", "http://127.0.0.1:9",
                                   "--port", str(free_port())], env=env, stdout=log.open("wb"),
                                  stderr=subprocess.STDOUT, start_new_session=True)
        try:
            emulated.call(emulated.api.create(endpoint_slice(
                "chat-a", endpoint("pod-1", "10.1.0.1"), endpoint("pod-2", "10.1.0.2", ready=False))))
            wait_until(lambda: gauge(metrics_url, "loraplane_router_endpoints") == 1, timeout_s=30,
                       what="the router to list the ready pod", log=log)

            emulated.call(emulated.api.stop())
            wait_until(lambda: gauge(metrics_url, "loraplane_router_endpoints_stale") == 1, timeout_s=30,
                       what="the router to notice the API is away", log=log)
            assert gauge(metrics_url, "loraplane_router_endpoints") == 1
            assert "routing on the 1 ready pods listed last" in log.read_text()
        finally:
            router.terminate()
            router.wait(timeout=30)
