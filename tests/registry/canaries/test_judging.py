"""The analysis's arithmetic: quantiles from histogram buckets, and each verdict's rule."""

from __future__ import annotations

import pytest

from registry.canaries import analysis
from registry.canaries.schemas import SideMetrics
from registry.promotions.analysis_policy import CanaryAnalysis
from registry.traffic_windows.schemas import WINDOW_BUCKETS

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


def side(requests: int, errors: int = 0, p95_ms: float = 50.0, tps: float = 100.0) -> SideMetrics:
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
    (side(30, p95_ms=150), side(5), 61, analysis.PASS, set()),        # production too quiet to compare
])
def test_each_verdict(canary, production, elapsed, verdict, failing):
    checks, got = analysis.judge(POLICY, canary, production, elapsed)
    assert got == verdict
    assert {c.metric for c in checks if c.passed is False} == failing


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
