"""A step's traffic as the analysis reads it: only windows a registry stored and sealed, counted
by when each was stored against when the step was committed, never by window id."""

from __future__ import annotations

import random
import uuid
from datetime import timedelta

import pytest
from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from registry.tables import Pool, TrafficWindow
from registry.traffic_windows import repository as windows
from registry.traffic_windows import seals
from registry.traffic_windows import service as traffic
from registry.traffic_windows.schemas import ERROR_CLASSES, WINDOW_BUCKETS
from tests.support.nodes import issue_token
from devkit.units_of_work import unit_of_work

SLOTS = len(WINDOW_BUCKETS) + 1


@pytest.fixture
def pool_id(engine, promo_pools) -> int:
    with Session(engine) as session:
        return session.scalar(select(Pool.id).where(Pool.name == promo_pools["open"]))


@pytest.fixture
def names(engine, pool_id):
    """Served names of this test alone, and their windows removed afterwards."""
    tag = uuid.uuid4().hex[:8]
    made = [f"acme/seals-{tag}@1", f"acme/seals-{tag}@2"]
    yield made
    with unit_of_work(engine) as session:
        session.execute(delete(TrafficWindow).where(TrafficWindow.served_name.in_(made)))


def a_window(pool_id: int, served: str, rng: random.Random, **fields) -> TrafficWindow:
    errors = {kind: rng.randint(0, 9) for kind in rng.sample(ERROR_CLASSES, rng.randint(0, 3))}
    return TrafficWindow(**{"router_id": "r1", **fields}, pool_id=pool_id, report_id=str(uuid.uuid4()),
                         served_name=served, alias="canary", requests=rng.randint(1, 400), errors=errors,
                         completion_tokens=rng.randint(0, 9000), busy_s=rng.uniform(0, 30), shadow_compared=10,
                         shadow_agreed=rng.randint(0, 10), ttft_buckets=[rng.randint(0, 50) for _ in range(SLOTS)],
                         latency_buckets=[rng.randint(0, 50) for _ in range(SLOTS)])


@pytest.fixture
def router_client(admin, client_with, promo_pools):
    token = issue_token(admin, "router-s", role="router", pool=promo_pools["open"], instance_id="router-s")
    return client_with(token)


def test_a_window_written_to_the_database_directly_is_not_counted(router_client, promo_pools, engine, pool_id, names):
    since = windows.database_now(Session(engine))
    window = {"served_name": names[0], "alias": "canary", "requests": 30, "errors": {}, "completion_tokens": 300,
              "busy_s": 1.5, "ttft_buckets": [0, 0, 0, 30] + [0] * (SLOTS - 4),
              "latency_buckets": [0, 0, 0, 30] + [0] * (SLOTS - 4)}
    stored = router_client.put(f"/v1/pools/{promo_pools['open']}/routers/router-s/traffic", json={
        "requests_per_s": {}, "report_id": str(uuid.uuid4()), "windows": [window]})
    assert stored.status_code == 204, stored.text
    with unit_of_work(engine) as session:
        # Written with SQL: as a second router, and one count of the sealed window raised.
        forged = a_window(pool_id, names[0], random.Random(3), router_id="router-z",
                          at=windows.database_now(session))
        session.add(forged)
        session.execute(update(TrafficWindow).where(TrafficWindow.served_name == names[0],
                                                    TrafficWindow.router_id == "router-s")
                        .values(requests=TrafficWindow.requests))  # untouched: still sealed
    with Session(engine) as session:
        counted, unsealed = traffic.sealed_since(session, pool_id, names, since)
    assert [(w.router_id, w.requests) for w in counted] == [("router-s", 30)] and unsealed == 1

    with unit_of_work(engine) as session:
        session.execute(update(TrafficWindow).where(TrafficWindow.served_name == names[0],
                                                    TrafficWindow.router_id == "router-s")
                        .values(requests=5000))
    with Session(engine) as session:
        counted, unsealed = traffic.sealed_since(session, pool_id, names, since)
    assert counted == [] and unsealed == 2


def test_a_window_counts_by_when_it_was_stored_never_by_its_id(engine, pool_id, names):
    rng = random.Random(11)
    canary, _ = names
    with Session(engine, expire_on_commit=False) as session, session.begin():
        step_began = windows.database_now(session)
        # Stored first, so with the lower id, yet after the step began: it counts.
        after = a_window(pool_id, canary, rng, at=step_began + timedelta(seconds=1))
        # Stored second, so with the higher id, yet stamped before the step: traffic routed at
        # the previous weight, which a bound by id would have counted.
        before = a_window(pool_id, canary, rng, at=step_began - timedelta(seconds=1))
        for window in (after, before):
            window.seal = seals.seal(window)  # as the registry seals what it stores
            session.add(window)
            session.flush()
    assert before.id > after.id
    with Session(engine) as session:
        counted, unsealed = traffic.sealed_since(session, pool_id, names, step_began)
    assert [w.id for w in counted] == [after.id] and unsealed == 0


def test_on_the_embedded_sqlite_database_windows_are_stamped_sealed_and_counted(tmp_path):
    """SQLite, the embedded default, has no clock_timestamp() and hands times back naive."""
    from migrations import runner
    from registry.db import make_engine
    from registry.promotions import canary_actions
    from registry.tables import BaseModel
    from registry.traffic_windows.schemas import WindowDelta

    url = f"sqlite:///{tmp_path / 'embedded.db'}"
    runner.upgrade(url)
    engine = make_engine(url)
    with unit_of_work(engine) as session:
        base = BaseModel(name="b", architecture="LlamaForCausalLM", hidden_size=64, num_layers=2,
                         vocab_size=256, config={})
        session.add(base)
        session.flush()
        pool = Pool(name="p", base_model_id=base.id, dtype="float32", max_loras=1, max_cpu_loras=1,
                    max_lora_rank=8, required_suites=[])
        session.add(pool)
        session.flush()
        pool_id = pool.id
    with unit_of_work(engine) as session:
        began = canary_actions.step_start(session)["step_started_at"]
    delta = WindowDelta(served_name="acme/x@1", alias="canary", requests=7, errors={}, completion_tokens=70,
                        busy_s=0.5, ttft_buckets=[7] + [0] * (SLOTS - 1), latency_buckets=[7] + [0] * (SLOTS - 1))
    with unit_of_work(engine) as session:
        assert traffic.record(session, pool_id, "r1", str(uuid.uuid4()), [delta])
    with Session(engine) as session:
        from datetime import datetime

        counted, unsealed = traffic.sealed_since(session, pool_id, ["acme/x@1"], datetime.fromisoformat(began))
    assert [w.requests for w in counted] == [7] and unsealed == 0
    engine.dispose()
