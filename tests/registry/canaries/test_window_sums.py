"""A step's traffic as the analysis reads it: summed by the database, per router, and counted by
when each window was stored against when the step was committed, never by window id."""

from __future__ import annotations

import random
import uuid
from datetime import timedelta

import pytest
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from registry.canaries import analysis
from registry.promotions.analysis_policy import CanaryAnalysis
from registry.tables import Pool, TrafficWindow
from registry.traffic_windows import repository as windows
from registry.traffic_windows.schemas import ERROR_CLASSES, WINDOW_BUCKETS

SLOTS = len(WINDOW_BUCKETS) + 1
POLICY = CanaryAnalysis(steps=[{"weight": 10}], window_s=60, min_requests=20, max_error_rate=0.05,
                        max_ttft_p95_ratio=2.0, max_latency_p95_ratio=2.0, min_tokens_per_s_ratio=0.5)


@pytest.fixture
def pool_id(engine, promo_pools) -> int:
    with Session(engine) as session:
        return session.scalar(select(Pool.id).where(Pool.name == promo_pools["open"]))


@pytest.fixture
def names(engine, pool_id):
    """Served names of this test alone, and their windows removed afterwards."""
    tag = uuid.uuid4().hex[:8]
    made = [f"acme/sums-{tag}@1", f"acme/sums-{tag}@2"]
    yield made
    with Session(engine) as session, session.begin():
        session.execute(delete(TrafficWindow).where(TrafficWindow.served_name.in_(made)))


def a_window(pool_id: int, router: str, served: str, alias: str, rng: random.Random, **fields) -> TrafficWindow:
    requests = rng.randint(0, 400)
    errors = {kind: rng.randint(0, 9) for kind in rng.sample(ERROR_CLASSES, rng.randint(0, 3))}
    return TrafficWindow(pool_id=pool_id, router_id=router, report_id=str(uuid.uuid4()), served_name=served,
                         alias=alias, requests=requests, errors=errors, completion_tokens=rng.randint(0, 9000),
                         busy_s=rng.uniform(0, 30), shadow_compared=10, shadow_agreed=rng.randint(0, 10),
                         ttft_buckets=[rng.randint(0, 50) for _ in range(SLOTS)],
                         latency_buckets=[rng.randint(0, 50) for _ in range(SLOTS)], **fields)


def rounded(metrics) -> dict:
    """A side's figures, floats to nine digits: the database adds busy seconds in its own order."""
    return {k: round(v, 9) if isinstance(v, float) else v for k, v in metrics.model_dump().items()}


def test_the_database_sums_what_the_analysis_would_sum_window_by_window(engine, pool_id, names):
    rng = random.Random(7)
    canary, production = names
    with Session(engine) as session:
        since = windows.database_now(session)
    with Session(engine, expire_on_commit=False) as session, session.begin():
        rows = [a_window(pool_id, rng.choice(["r1", "r2", "r3"]), *rng.choice([(canary, "canary"),
                                                                             (production, "production")]), rng)
                for _ in range(60)]
        session.add_all(rows)
    with Session(engine) as session:
        sums = windows.sums_since(session, pool_id, names, since)
    assert sum(s.requests for s in sums) == sum(r.requests for r in rows) > 0
    assert len(sums) <= 6  # one row per router, name and alias, however many windows
    for name, alias in ((canary, "canary"), (production, "production")):
        assert rounded(analysis.side(name, alias, sums)) == rounded(analysis.side(name, alias, rows))
    assert (analysis.by_router(POLICY, canary, production, sums, 61)
            == analysis.by_router(POLICY, canary, production, rows, 61))


def test_a_window_counts_by_when_it_was_stored_never_by_its_id(engine, pool_id, names):
    rng = random.Random(11)
    canary, _ = names
    with Session(engine, expire_on_commit=False) as session, session.begin():
        step_began = windows.database_now(session)
        # Stored first, so with the lower id, yet after the step began: it counts.
        after = a_window(pool_id, "r1", canary, "canary", rng, at=step_began + timedelta(seconds=1))
        session.add(after)
        session.flush()
        # Stored second, so with the higher id, yet stamped before the step: traffic routed at
        # the previous weight, which a bound by id would have counted.
        before = a_window(pool_id, "r1", canary, "canary", rng, at=step_began - timedelta(seconds=1))
        session.add(before)
    assert before.id > after.id
    with Session(engine) as session:
        (summed,) = windows.sums_since(session, pool_id, names, step_began)
    assert summed.requests == after.requests
    assert summed.ttft_buckets == after.ttft_buckets and summed.errors == after.errors
