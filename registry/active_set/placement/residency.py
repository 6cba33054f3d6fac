"""How a pool serves its long tail, from the routers' sealed traffic windows over a recent span:
the share of answered requests that found their adapter resident on the node they went to, the
cold loads per minute (requests sent to a node that loaded the adapter on demand), and the TTFTs
of both. A tenant sees only its own versions' requests."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.orm import Session

from registry.active_set.reading.visibility import visible_to
from registry.auth.principal import Principal
from registry.pool_lookup import pool_by_name
from registry.traffic_windows import repository, service
from registry.traffic_windows.histograms import quantile, sum_buckets
from registry.traffic_windows.schemas import ResidencyOut


def residency(session: Session, principal: Principal, pool_name: str, window_s: int) -> ResidencyOut:
    principal.require_pool_viewer(pool_name)
    pool = pool_by_name(session, pool_name)
    since = repository.database_now(session) - timedelta(seconds=window_s)
    windows, _ = service.only_sealed(repository.pool_windows_since(session, pool.id, since), pool.id)
    visible = visible_to(principal)
    mine = [window for window in windows if visible(window.served_name)]
    every = sum_buckets(window.ttft_buckets for window in mine)
    # None on windows stored before routers counted cold requests.
    cold = sum_buckets(window.cold_ttft_buckets for window in mine if window.cold_ttft_buckets is not None)
    warm = [a - b for a, b in zip(every, cold, strict=True)]
    answered, cold_answered = sum(every), sum(cold)
    return ResidencyOut(
        pool=pool.name, overflow=pool.overflow, window_s=window_s, answered=answered,
        cold_requests=cold_answered,
        resident_hit_ratio=None if not answered else round(1 - cold_answered / answered, 4),
        cold_loads_per_minute=round(cold_answered / (window_s / 60), 3),
        cold_ttft_p50_ms=_ms(quantile(cold, 0.5)), cold_ttft_p99_ms=_ms(quantile(cold, 0.99)),
        warm_ttft_p50_ms=_ms(quantile(warm, 0.5)), warm_ttft_p99_ms=_ms(quantile(warm, 0.99)))


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)
