"""The routers' TTFT and latency histograms, as their windows carry them: bucket counts over
WINDOW_BUCKETS and one more bucket for what lies above."""

from __future__ import annotations

from collections.abc import Iterable

from registry.traffic_windows.schemas import WINDOW_BUCKETS


def sum_buckets(lists: Iterable[list[int]]) -> list[int]:
    total = [0] * (len(WINDOW_BUCKETS) + 1)
    for counts in lists:
        total = [a + b for a, b in zip(total, counts, strict=False)]
    return total


def quantile(buckets: list[int], q: float) -> float | None:
    """The q-quantile of a histogram, interpolated within its bucket as Prometheus does; what
    lies above the last bound counts as the last bound."""
    count = sum(buckets)
    if count == 0:
        return None
    rank, below = q * count, 0
    for index, in_bucket in enumerate(buckets):
        if below + in_bucket >= rank and in_bucket:
            if index == len(WINDOW_BUCKETS):
                return WINDOW_BUCKETS[-1]
            lower = WINDOW_BUCKETS[index - 1] if index else 0.0
            return lower + (WINDOW_BUCKETS[index] - lower) * (rank - below) / in_bucket
        below += in_bucket
    return WINDOW_BUCKETS[-1]
