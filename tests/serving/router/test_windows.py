"""What the router tells the registry of each served name between two traffic reports: a report
the registry did not take is sent again unchanged, under the same id, and what happens meanwhile
waits for the next one; a report is never larger than the registry takes, and one it refuses is
dropped, not sent for ever."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from registry.active_set.placement.schemas import TrafficReport
from registry.tables import TrafficWindow
from registry.traffic_windows.schemas import ERROR_CLASSES, MAX_WINDOWS, WINDOW_BUCKETS, WindowDelta
from serving.registry_client import RegistryClient
from serving.router.main import Router
from serving.router.metrics import LATENCY_BUCKETS
from serving.router.settings import RouterSettings
from serving.router.windows import MAX_WINDOWS_PER_REPORT, WindowMeter, error_class
from tests.support.nodes import issue_token


def test_a_report_not_taken_is_sent_again_unchanged_and_new_traffic_waits():
    meter = WindowMeter()
    assert meter.take() is None  # nothing happened: nothing to send
    meter.answered("acme/a@1", "canary", 200, ttft_s=0.02, latency_s=0.3, completion_tokens=12)
    meter.answered("acme/a@1", "canary", 500, ttft_s=0.01, latency_s=0.01, completion_tokens=0)
    first = meter.take()

    meter.failed("acme/a@1", "canary", 503)  # while the registry is away
    again = meter.take()

    assert again == first  # the same id and the same deltas
    (window,) = first[1]
    assert (window["requests"], window["errors"], window["completion_tokens"]) == (2, {"server_error": 1}, 12)
    assert sum(window["latency_buckets"]) == 1 and window["latency_buckets"][LATENCY_BUCKETS.index(0.5)] == 1
    meter.acknowledged()
    report_id, (later,) = meter.take()
    assert report_id != first[0] and (later["requests"], later["errors"]) == (1, {"unavailable": 1})


def test_the_router_and_the_registry_agree_on_buckets_and_classes():
    meter = WindowMeter()
    meter.answered("acme/a@1", "production", 200, ttft_s=200.0, latency_s=200.0, completion_tokens=1)
    meter.failed("acme/a@1", "production", 0)
    meter.shadowed("acme/a@1", "production", agreed=True)
    _, deltas = meter.take()
    WindowDelta.model_validate(deltas[0])  # what the registry accepts
    assert LATENCY_BUCKETS == WINDOW_BUCKETS
    assert {error_class(s) for s in (500, 502, 503, 504)} | {"broken"} == set(ERROR_CLASSES)
    assert error_class(404) is None and error_class(200) is None


def test_a_report_holds_at_most_what_the_registry_takes_and_the_rest_goes_next_oldest_first():
    meter = WindowMeter()
    for i in range(MAX_WINDOWS + 88):
        meter.answered(f"acme/w{i}@1", "production", 200, ttft_s=0.01, latency_s=0.02, completion_tokens=1)
    first_id, first = meter.take()
    assert len(first) == MAX_WINDOWS_PER_REPORT == MAX_WINDOWS
    TrafficReport.model_validate({"requests_per_s": {}, "report_id": first_id, "windows": first})
    meter.acknowledged()
    for i in range(MAX_WINDOWS):  # as many new names again, opened after the left-over ones
        meter.answered(f"acme/late{i}@1", "canary", 200, ttft_s=0.01, latency_s=0.02, completion_tokens=1)
    _, second = meter.take()
    names = {w["served_name"] for w in second}
    assert len(second) == MAX_WINDOWS and {w["served_name"] for w in first}.isdisjoint(names)
    assert {f"acme/w{i}@1" for i in range(MAX_WINDOWS, MAX_WINDOWS + 88)} <= names  # the oldest go first


@pytest.fixture(scope="module")
def reporting_router(admin, base_model, registry) -> Router:
    pool = "windows-pool"
    created = admin.post("/v1/pools", json={"name": pool, "base_model": base_model, "max_loras": 1,
                                            "max_cpu_loras": 2, "max_lora_rank": 16})
    assert created.status_code == 201, created.text
    token = issue_token(admin, "router-w", role="router", pool=pool, instance_id="router-w")
    return Router(RouterSettings(pool=pool, registry_url=registry.url, token=token))


def stored_windows(engine) -> list[tuple[str, int]]:
    with Session(engine) as session:
        rows = session.scalars(select(TrafficWindow).where(TrafficWindow.router_id == "router-w")
                               .order_by(TrafficWindow.id))
        return [(row.served_name, row.requests) for row in rows]


def test_a_report_the_registry_refuses_is_dropped_and_the_next_is_taken(reporting_router, engine):
    """A refusal is final (a registry of another version may refuse what this router counts):
    sent again it would be refused again, and every later window would wait behind it."""
    router = reporting_router

    async def report() -> None:
        await router.report_traffic("router-w")
        await router.registry.close()

    router.windows.answered("acme/not-a-served-name", "canary", 500, ttft_s=0, latency_s=0, completion_tokens=0)
    asyncio.run(report())
    assert stored_windows(engine) == []

    router.registry = RegistryClient(str(router.settings.registry_url), router.settings.token.get_secret_value(),
                                     router.settings.pool, timeout_s=10)
    router.windows.answered("acme/w@1", "canary", 200, ttft_s=0.01, latency_s=0.02, completion_tokens=3)
    asyncio.run(report())
    assert stored_windows(engine) == [("acme/w@1", 1)]
