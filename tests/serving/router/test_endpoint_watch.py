"""The router learns where a pool's pods are from the EndpointSlices of the pool's headless
Service, listed and watched through the Kubernetes API (kmock's emulator here, since no cluster
runs): a pod that comes is routable once ready, one that goes or stops being ready is not; the
slices of one service are merged; and an API server that restarts, a watch stream that closes or
a resourceVersion gone stale (410) cost nothing but a fresh listing, while the router keeps
routing on what it listed last."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from kmock import action

from serving.router import endpoint_watch, metrics
from serving.router.endpoint_watch import EndpointWatch, api_client
from tests.registry.webhooks.receivers import self_signed
from tests.serving.router.kube_api import NAMESPACE, SERVICE, SLICES, KubeApi, endpoint, endpoint_slice, settle
from tests.support.until import until

pytestmark = pytest.mark.fast


@asynccontextmanager
async def watching(api: KubeApi) -> AsyncIterator[EndpointWatch]:
    """The router's watch of SERVICE's slices, at vLLM's port named "vllm"."""
    client = api_client(api.url)
    watch = EndpointWatch(client, NAMESPACE, SERVICE, "vllm", "http", on_change=lambda _: None)
    task = asyncio.create_task(watch.run())
    try:
        yield watch
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()


async def routed_to(watch: EndpointWatch, expected: dict[str, str], what: str = "") -> None:
    await until(lambda: watch.addresses == expected, what=what or f"addresses {expected}")


def failures(reason: str) -> float:
    return metrics.REGISTRY.get_sample_value("loraplane_router_endpoint_watch_failures_total",
                                             {"reason": reason}) or 0.0


def run(scenario) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_pod_that_comes_is_routable_and_one_that_goes_is_not():
    async def scenario() -> None:
        async with KubeApi() as api, watching(api) as watch:
            await api.create(endpoint_slice("chat-a", endpoint("pod-1", "10.1.0.1")))
            await routed_to(watch, {"pod-1": "http://10.1.0.1:8000"}, "the first pod")

            await api.patch("chat-a", {"endpoints": [endpoint("pod-1", "10.1.0.1"), endpoint("pod-2", "10.1.0.2")]})
            await routed_to(watch, {"pod-1": "http://10.1.0.1:8000", "pod-2": "http://10.1.0.2:8000"})

            await api.patch("chat-a", {"endpoints": [endpoint("pod-2", "10.1.0.2")]})
            await routed_to(watch, {"pod-2": "http://10.1.0.2:8000"}, "pod-1 gone")

            await api.delete("chat-a")
            await routed_to(watch, {}, "the slice gone")
            assert api.requests(watch=False) == 1  # all of it through one watch

    run(scenario)


def test_only_ready_pods_that_are_not_terminating_get_traffic():
    """`ready` absent means ready (the API's own rule); endpoints that are not pods, slices of
    other services and slices without vLLM's port are no nodes."""
    async def scenario() -> None:
        async with KubeApi() as api, watching(api) as watch:
            await api.create(endpoint_slice(
                "chat-a",
                endpoint("ready", "10.1.0.1"),
                endpoint("unsaid", "10.1.0.2", ready=None),
                endpoint("starting", "10.1.0.3", ready=False),
                endpoint("stopping", "10.1.0.4", ready=None, terminating=True),
                endpoint("draining", "10.1.0.5", ready=True, terminating=True),
                endpoint(None, "10.1.0.6"),  # no targetRef: an address someone added by hand
                endpoint("worker-7", "10.1.0.7", kind="Node")))
            await api.create(endpoint_slice("chat-v6", endpoint("six", "fd00::6"), address_type="IPv6"))
            await api.create(endpoint_slice("other-a", endpoint("other", "10.2.0.1"), service="other"))
            await api.create(endpoint_slice("chat-metrics", endpoint("metrics", "10.1.0.9"), port_name="metrics"))
            await routed_to(watch, {"ready": "http://10.1.0.1:8000", "unsaid": "http://10.1.0.2:8000",
                                    "six": "http://[fd00::6]:8000"})

            await api.patch("chat-a", {"endpoints": [endpoint("ready", "10.1.0.1", ready=False, terminating=True),
                                                     endpoint("starting", "10.1.0.3")]})
            await routed_to(watch, {"starting": "http://10.1.0.3:8000", "six": "http://[fd00::6]:8000"},
                            "the started pod in, the stopping one out")

            await api.patch("chat-v6", {"metadata": {"labels": {"kubernetes.io/service-name": "other"}}})
            await routed_to(watch, {"starting": "http://10.1.0.3:8000"}, "a slice given to another service")

    run(scenario)


def test_the_slices_of_a_service_are_merged_and_a_deleted_one_takes_only_its_pods():
    async def scenario() -> None:
        async with KubeApi() as api, watching(api) as watch:
            await api.create(endpoint_slice("chat-a", endpoint("pod-1", "10.1.0.1")))
            await api.create(endpoint_slice("chat-b", endpoint("pod-2", "10.1.0.2"), endpoint("pod-3", "10.1.0.3")))
            both = {"pod-1": "http://10.1.0.1:8000", "pod-2": "http://10.1.0.2:8000",
                    "pod-3": "http://10.1.0.3:8000"}
            await routed_to(watch, both, "both slices")

            # The controller moves pod-3 to chat-a: listed twice for a moment, then once.
            await api.patch("chat-a", {"endpoints": [endpoint("pod-1", "10.1.0.1"), endpoint("pod-3", "10.1.0.3")]})
            await api.patch("chat-b", {"endpoints": [endpoint("pod-2", "10.1.0.2")]})
            await settle()
            assert watch.addresses == both

            await api.delete("chat-b")
            await routed_to(watch, {"pod-1": "http://10.1.0.1:8000", "pod-3": "http://10.1.0.3:8000"})

    run(scenario)


def test_an_api_server_restart_keeps_the_last_pods_then_lists_afresh(caplog):
    """While the API is away the router routes on what it listed last, says so once and shows it
    in its metrics; back, a fresh listing replaces all of it, a slice deleted meanwhile too."""
    caplog.set_level(logging.INFO, logger="loraplane.router")

    async def scenario() -> None:
        async with KubeApi() as api, watching(api) as watch:
            await api.create(endpoint_slice("chat-a", endpoint("pod-1", "10.1.0.1")))
            await api.create(endpoint_slice("chat-b", endpoint("pod-2", "10.1.0.2")))
            listed = {"pod-1": "http://10.1.0.1:8000", "pod-2": "http://10.1.0.2:8000"}
            await routed_to(watch, listed)
            unreachable = failures("unreachable")

            await api.stop()
            await until(lambda: failures("unreachable") >= unreachable + 3, timeout_s=10,
                        what="the router to try the API again, and again")
            assert watch.addresses == listed and watch.lost_since is not None
            assert metrics.REGISTRY.get_sample_value("loraplane_router_endpoints_stale") == 1
            lost = [r for r in caplog.records if r.getMessage().startswith("cannot read the EndpointSlices")]
            assert len(lost) == 1 and "routing on the 2 ready pods listed last" in lost[0].getMessage()

            # Meanwhile pod-2's slice goes and a new pod comes, with no watch to see either.
            api.emulator.objects[SLICES, NAMESPACE, "chat-b"].delete()
            api.emulator.objects[SLICES, NAMESPACE, "chat-c"] = endpoint_slice("chat-c", endpoint("pod-3", "10.1.0.3"))
            await api.start()

            await routed_to(watch, {"pod-1": "http://10.1.0.1:8000", "pod-3": "http://10.1.0.3:8000"},
                            "a fresh listing")
            assert watch.lost_since is None
            assert metrics.REGISTRY.get_sample_value("loraplane_router_endpoints_stale") == 0
            await api.create(endpoint_slice("chat-d", endpoint("pod-4", "10.1.0.4")))  # and watched again
            await until(lambda: "pod-4" in watch.addresses, what="pod-4 through the new watch")

    run(scenario)


def test_a_watch_stream_that_closes_is_opened_again_where_it_was():
    async def scenario() -> None:
        async with KubeApi() as api:
            api.emulator[action.WATCH, SLICES][:1] << b""  # the first watch ends at once, cleanly
            async with watching(api) as watch:
                await until(lambda: api.requests(watch=True) >= 2, what="a second watch")
                await api.create(endpoint_slice("chat-a", endpoint("pod-1", "10.1.0.1")))
                await routed_to(watch, {"pod-1": "http://10.1.0.1:8000"})
                assert api.requests(watch=False) == 1 and watch.lost_since is None

    run(scenario)


def test_a_resource_version_gone_stale_means_a_fresh_listing():
    async def scenario() -> None:
        async with KubeApi() as api:
            await api.create(endpoint_slice("chat-a", endpoint("pod-1", "10.1.0.1")))
            api.emulator[action.WATCH, SLICES][:1] << {"type": "ERROR", "object": {
                "apiVersion": "v1", "kind": "Status", "status": "Failure", "code": 410, "reason": "Expired",
                "message": "too old resource version: 100 (2000)"}}
            expired = failures("expired")
            async with watching(api) as watch:
                await until(lambda: api.requests(watch=False) == 2, what="a second listing")
                assert failures("expired") == expired + 1 and watch.lost_since is None
                await api.create(endpoint_slice("chat-b", endpoint("pod-2", "10.1.0.2")))
                await routed_to(watch, {"pod-1": "http://10.1.0.1:8000", "pod-2": "http://10.1.0.2:8000"})

    run(scenario)


def test_what_is_held_is_bounded(monkeypatch):
    monkeypatch.setattr(endpoint_watch, "MAX_SLICES", 2)

    async def scenario() -> None:
        async with KubeApi() as api, watching(api) as watch:
            for i in range(3):
                await api.create(endpoint_slice(f"chat-{i}", endpoint(f"pod-{i}", f"10.1.0.{i}")))
            await until(lambda: len(watch.addresses) == 2, what="two slices followed")
            await settle()
            assert sorted(watch.slices) == ["chat-0", "chat-1"]

    run(scenario)


def test_a_long_outage_keeps_its_pauses_short_enough():
    client = api_client("http://127.0.0.1:9")
    watch = EndpointWatch(client, NAMESPACE, SERVICE, "vllm", "http", lambda _: None)
    pauses = [watch._failed(ConnectionRefusedError()) for _ in range(5000)]  # days of failures
    asyncio.run(client.close())
    assert max(pauses) <= endpoint_watch.BACKOFF_MAX_S and max(pauses[-100:]) > 1


def test_a_fresh_listing_now_and_then_corrects_what_a_watch_missed(monkeypatch):
    """A watch can miss an event (an API server that dropped it, a stream silent but open); the
    listing every RELIST_S replaces what is held, and costs no failure."""
    monkeypatch.setattr(endpoint_watch, "RELIST_S", 0.3)

    async def scenario() -> None:
        async with KubeApi() as api, watching(api) as watch:
            await api.create(endpoint_slice("chat-a", endpoint("pod-1", "10.1.0.1")))
            await routed_to(watch, {"pod-1": "http://10.1.0.1:8000"})
            api.emulator.objects[SLICES, NAMESPACE, "chat-a"].delete()  # no event goes out
            await routed_to(watch, {}, "the next listing")
            assert api.requests(watch=False) >= 2 and watch.lost_since is None

    run(scenario)


def test_the_service_account_token_never_goes_to_a_plain_http_api(tmp_path):
    (tmp_path / "token").write_text("the-pods-token")
    (tmp_path / "namespace").write_text(NAMESPACE)

    async def scenario() -> None:
        async with KubeApi() as api:
            async with api_client(api.url, account=tmp_path) as client:
                watch = EndpointWatch(client, NAMESPACE, SERVICE, "vllm", "http", on_change=lambda _: None)
                task = asyncio.create_task(watch.run())
                await until(lambda: api.requests(watch=True) == 1, what="a watch")
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            assert all("authorization" not in {k.lower() for k in r.headers} for r in api.emulator)

    run(scenario)


def test_in_a_pod_the_api_is_reached_with_its_service_accounts_token_and_ca(tmp_path, monkeypatch):
    cert, key = self_signed(tmp_path, "localhost")
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("the-pods-token")
    (account / "ca.crt").write_bytes(cert.read_bytes())
    (account / "namespace").write_text(NAMESPACE)

    async def scenario() -> None:
        async with KubeApi(tls=(cert, key)) as api:
            api.emulator.objects[SLICES, NAMESPACE, "chat-a"] = endpoint_slice("chat-a", endpoint("pod-1", "10.1.0.1"))
            monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "localhost")
            monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(api.port))
            async with api_client(None, account=account) as client:
                watch = EndpointWatch(client, NAMESPACE, SERVICE, "vllm", "http", on_change=lambda _: None)
                task = asyncio.create_task(watch.run())
                await routed_to(watch, {"pod-1": "http://10.1.0.1:8000"}, "pod-1 over TLS")
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            asked = [r for r in api.emulator if r.resource == SLICES]
            assert asked and all(r.headers.get("Authorization") == "Bearer the-pods-token" for r in asked)

    run(scenario)
