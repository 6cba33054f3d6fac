"""Judge a canary against production on the traffic of one window. Pure: rows in, verdict out.

Each side is the traffic its alias took: the canary's weighted share (and requests that name the
canary alias), never requests pinned to the same version by number. Each check is judged only
once both sides it compares have the policy's `min_requests`, so that a handful of requests never
decides. A failed check fails the canary at once; the step passes when its window is over and
every check was judged and passed: a production too quiet to compare with keeps the canary
waiting, never waves it through."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from registry.canaries.schemas import Check, SideMetrics
from registry.promotions.analysis_policy import CanaryAnalysis
from registry.tables import TrafficWindow
from registry.traffic_windows.histograms import quantile, sum_buckets as _sum_buckets

FAIL, PASS, WAIT = "fail", "pass", "wait"


def side(served_name: str, alias: str, rows: Iterable[TrafficWindow]) -> SideMetrics:
    mine = [r for r in rows if r.served_name == served_name and r.alias == alias]
    requests = sum(r.requests for r in mine)
    errors: dict[str, int] = {}
    for row in mine:
        for kind, count in row.errors.items():
            errors[kind] = errors.get(kind, 0) + count
    busy = sum(r.busy_s for r in mine)
    compared = sum(r.shadow_compared for r in mine)
    return SideMetrics(
        served_name=served_name, requests=requests, errors=errors,
        error_rate=sum(errors.values()) / requests if requests else None,
        ttft_p95_ms=_ms(quantile(_sum_buckets(r.ttft_buckets for r in mine), 0.95)),
        latency_p95_ms=_ms(quantile(_sum_buckets(r.latency_buckets for r in mine), 0.95)),
        tokens_per_s=sum(r.completion_tokens for r in mine) / busy if busy > 0 else None,
        shadow_agreement=sum(r.shadow_agreed for r in mine) / compared if compared else None,
        shadow_compared=compared)


def judge(policy: CanaryAnalysis, canary: SideMetrics, production: SideMetrics,
          elapsed_s: float) -> tuple[list[Check], str]:
    canary_short = _short_of("canary", canary, policy.min_requests)
    both_short = canary_short or _short_of("production", production, policy.min_requests)
    checks = [_limit("error_rate", canary.error_rate, canary.error_rate, production.error_rate,
                     policy.max_error_rate, canary_short, at_most=True)]
    if policy.max_error_rate_increase is not None:
        increase = (None if canary.error_rate is None or production.error_rate is None
                    else canary.error_rate - production.error_rate)
        checks.append(_limit("error_rate_increase", increase, canary.error_rate, production.error_rate,
                             policy.max_error_rate_increase, both_short, at_most=True))
    for metric, mine, theirs, limit, at_most in (
            ("ttft_p95_ratio", canary.ttft_p95_ms, production.ttft_p95_ms, policy.max_ttft_p95_ratio, True),
            ("latency_p95_ratio", canary.latency_p95_ms, production.latency_p95_ms,
             policy.max_latency_p95_ratio, True),
            ("tokens_per_s_ratio", canary.tokens_per_s, production.tokens_per_s,
             policy.min_tokens_per_s_ratio, False)):
        if limit is None:
            continue
        if both_short is None and mine is not None and not theirs:
            # Production answered nothing it could be measured on (every answer failed, or
            # carried no tokens): no ratio exists, and waiting would never make one.
            checks.append(Check(metric=metric, passed=True, canary=mine, production=theirs, limit=limit,
                                detail=f"production has no {metric.removesuffix('_ratio')} in this window "
                                       "to compare with; the canary is held to its other checks"))
            continue
        ratio = mine / theirs if mine is not None and theirs else None
        checks.append(_limit(metric, ratio, mine, theirs, limit, both_short, at_most=at_most))
    if any(c.passed is False for c in checks):
        return checks, FAIL
    if elapsed_s >= policy.window_s and all(c.passed for c in checks):
        return checks, PASS
    return checks, WAIT


def by_router(policy: CanaryAnalysis, canary_name: str, production_name: str,
              rows: Iterable[TrafficWindow], elapsed_s: float) -> dict[str, str]:
    """Each router's own verdict, on its own windows alone: what one router token says, never
    summed with the others', so that it can be told apart and counted as one source."""
    mine: dict[str, list[TrafficWindow]] = defaultdict(list)
    for row in rows:
        mine[row.router_id].append(row)
    return {router: judge(policy, side(canary_name, "canary", windows),
                          side(production_name, "production", windows), elapsed_s)[1]
            for router, windows in sorted(mine.items())}


def _short_of(name: str, metrics: SideMetrics, min_requests: int) -> str | None:
    """Why a side cannot be judged yet, or None."""
    if metrics.requests < min_requests:
        return f"{name} has {metrics.requests} of the {min_requests} requests a verdict needs"
    return None


def _limit(metric: str, value: float | None, mine: float | None, theirs: float | None, limit: float,
           short: str | None, *, at_most: bool) -> Check:
    if short is not None or value is None:
        why = short or "no measurement of it in this window"
        return Check(metric=metric, passed=None, canary=mine, production=theirs, limit=limit,
                     detail=f"not judged yet: {why}")
    passed = value <= limit if at_most else value >= limit
    word = "at most" if at_most else "at least"
    return Check(metric=metric, passed=passed, canary=mine, production=theirs, limit=limit,
                 detail=f"{metric} {value:.4g}, {word} {limit:g} allowed")


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000
