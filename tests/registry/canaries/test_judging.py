"""The analysis's arithmetic: quantiles from histogram buckets, and each verdict's rule."""

from __future__ import annotations

import pytest

from registry.canaries import analysis
from registry.canaries.schemas import SideMetrics
from registry.promotions.analysis_policy import CanaryAnalysis
from registry.tables import TrafficWindow
from registry.traffic_windows.schemas import WINDOW_BUCKETS

pytestmark = pytest.mark.fast

SLOTS = len(WINDOW_BUCKETS) + 1


def buckets(**at: int) -> list[int]:
    """Counts by bucket index, e.g. buckets(b3=10)."""
    counts = [0] * SLOTS
    for key, count in at.items():
        counts[int(key[1:])] = count
    return counts


def test_a_quantile_interpolates_within_its_bucket_like_prometheus():
    # 100 answers between 0.05 and 0.1 s: the 95th lies 95% of the way through that bucket.
    assert analysis.quantile(buckets(b4=100), 0.95) == pytest.approx(0.05 + 0.05 * 0.95)
    assert analysis.quantile(buckets(b0=50, b4=50), 0.5) == pytest.approx(0.005)
    assert analysis.quantile(buckets(b14=3), 0.95) == WINDOW_BUCKETS[-1]  # above every bound
    assert analysis.quantile(buckets(), 0.95) is None


def side(requests: int, errors: int = 0, p95_ms: float | None = 50.0, tps: float = 100.0) -> SideMetrics:
    return SideMetrics(served_name="acme/x@1", requests=requests, errors={"server_error": errors},
                       error_rate=errors / requests if requests else None, ttft_p95_ms=p95_ms,
                       latency_p95_ms=p95_ms, tokens_per_s=tps)


POLICY = CanaryAnalysis(steps=[{"weight": 10}], window_s=60, min_requests=20, max_error_rate=0.05,
                        max_ttft_p95_ratio=2.0, max_latency_p95_ratio=2.0, min_tokens_per_s_ratio=0.5)


@pytest.mark.parametrize(("canary", "production", "elapsed", "verdict", "failing"), [
    (side(30), side(300), 61, analysis.PASS, set()),
    (side(30), side(300), 30, analysis.WAIT, set()),                  # the window is not over
    (side(10), side(300), 600, analysis.WAIT, set()),                 # too few canary requests
    (side(10, errors=10), side(300), 5, analysis.WAIT, set()),        # even failing ones
    (side(30, errors=5), side(300), 5, analysis.FAIL, {"error_rate"}),  # fails within the window
    (side(30, p95_ms=150), side(300), 61, analysis.FAIL, {"ttft_p95_ratio", "latency_p95_ratio"}),
    (side(30, tps=40), side(300), 61, analysis.FAIL, {"tokens_per_s_ratio"}),
    # Production too quiet to compare with: the canary waits, however long, and is never passed
    # on its own numbers.
    (side(990, p95_ms=120_000), side(10), 6000, analysis.WAIT, set()),
    (side(30, p95_ms=None), side(300), 61, analysis.WAIT, set()),     # no canary latency measured
    # Production's answers all failed: nothing to compare with, and waiting would not help.
    (side(30), side(300, errors=300, p95_ms=None, tps=0.0), 61, analysis.PASS, set()),
])
def test_each_verdict(canary, production, elapsed, verdict, failing):
    checks, got = analysis.judge(POLICY, canary, production, elapsed)
    assert got == verdict
    assert {c.metric for c in checks if c.passed is False} == failing


def test_an_unjudged_check_says_which_side_is_short():
    checks, verdict = analysis.judge(POLICY, side(990), side(10), 6000)
    assert verdict == analysis.WAIT
    by_metric = {c.metric: c for c in checks}
    assert by_metric["error_rate"].passed is True  # the canary's own rate needs no production
    assert by_metric["latency_p95_ratio"].passed is None
    assert by_metric["latency_p95_ratio"].detail == \
        "not judged yet: production has 10 of the 20 requests a verdict needs"


def window(alias: str, requests: int, errors: int, at_bucket: int) -> TrafficWindow:
    return TrafficWindow(served_name="acme/x@2", alias=alias, requests=requests,
                         errors={"server_error": errors} if errors else {}, completion_tokens=requests,
                         busy_s=float(requests), ttft_buckets=buckets(**{f"b{at_bucket}": requests - errors}),
                         latency_buckets=buckets(**{f"b{at_bucket}": requests - errors}),
                         shadow_compared=0, shadow_agreed=0)


def test_a_side_is_its_alias_traffic_alone():
    """Requests pinned to the canary's version by number (`acme/x@2`) are no evidence about the
    canary alias: cheap pinned traffic cannot dilute a failing canary's numbers."""
    rows = [window("canary", 100, 40, 14), window("pinned", 5000, 0, 0)]
    canary = analysis.side("acme/x@2", "canary", rows)
    assert (canary.requests, canary.error_rate) == (100, 0.4)
    assert canary.latency_p95_ms == WINDOW_BUCKETS[-1] * 1000
    assert analysis.side("acme/x@2", "production", rows).requests == 0


@pytest.mark.parametrize(("spec", "message"), [
    ({"steps": []}, "steps"),
    ({"steps": [{"weight": 50}, {"weight": 20}]}, "step weights must rise, each once; got [50, 20]"),
    ({"steps": [{"weight": 100}]}, "weight"),
    ({"steps": [{"weight": 5}], "shadow_fraction": 0.9}, "shadow_fraction"),
    ({"steps": [{"weight": 5}], "window_s": 0}, "window_s"),
])
def test_a_bad_policy_is_refused(spec, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        CanaryAnalysis.model_validate(spec)
