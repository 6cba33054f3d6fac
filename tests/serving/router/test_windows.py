"""What the router tells the registry of each served name between two traffic reports: a report
the registry did not take is sent again unchanged, under the same id, and what happens meanwhile
waits for the next one."""

from __future__ import annotations

from serving.router.metrics import LATENCY_BUCKETS
from serving.router.windows import WindowMeter, error_class
from registry.traffic_windows.schemas import ERROR_CLASSES, WINDOW_BUCKETS, WindowDelta


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
