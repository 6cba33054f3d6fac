"""Reports racing through two registry processes mark each version once; a change to the base
model's config marks the versions too, and a config that changes back leaves nothing to do."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
from sqlalchemy import select, update

from registry.requalification.service import observe_base_model
from registry.tables import BaseModel
from tests.registry.requalification.support import (
    RQ_BASE, RQ_SUITE, audit_count, config_sha256, declare, evaluation_rows, make_pool, marks, node_report,
    pool_row, register_base_with_suite, report, version_id,
)
from tests.support.nodes import bound_address, issue_token
from devkit.units_of_work import unit_of_work

CONFIG_BASE, CONFIG_SUITE = "requal-config-base", "requal-config-suite"


def test_reports_racing_through_two_registries_mark_each_version_once(
        admin, requal_base, serve, fleets, engine, registry, second_registry):
    pool = "rq-race"
    make_pool(admin, pool, RQ_BASE, RQ_SUITE)
    ids = {version_id(engine, serve(pool, name)) for name in ("acme/rq-race-a", "acme/rq-race-b")}
    declare(admin, pool, "0.32.0")
    report(fleets(pool).client("node-0"), pool, "node-0", "0.32.0")
    evaluations = len(evaluation_rows(engine, ids))
    # New nodes: each first report inserts its status row, whose foreign key share-locks the pool
    # row, before the pool's lock is taken to mark (a deadlock while that lock was FOR UPDATE).
    clients = []
    for n in range(12):
        node_id = f"racer-{n}"
        token = issue_token(admin, node_id, role="node", pool=pool, instance_id=node_id,
                            vllm_url=bound_address(node_id))
        url = (registry if n % 2 else second_registry).url
        clients.append((node_id, httpx.Client(base_url=url, timeout=60,
                                              headers={"Authorization": f"Bearer {token}"})))

    def send(item) -> int:
        node_id, client = item
        return client.put(f"/v1/pools/{pool}/nodes/{node_id}/status",
                          json=node_report("0.40.0")).status_code

    try:
        with ThreadPoolExecutor(len(clients)) as threads:
            assert list(threads.map(send, clients)) == [200] * len(clients)
    finally:
        for _, client in clients:
            client.close()

    made = marks(engine, pool)
    assert sorted(m.version_id for m in made) == sorted(ids)
    assert len(evaluation_rows(engine, ids)) == evaluations + len(ids)
    assert audit_count(engine, "requalification.mark", f"pool/{pool}/") == len(ids)


def test_a_base_config_change_marks_the_versions_and_changing_it_back_supersedes_the_marks(
        admin, tiny_base, serve, fleets, engine):
    config = register_base_with_suite(admin, tiny_base, CONFIG_BASE, CONFIG_SUITE)
    pool = "rq-config"
    created = make_pool(admin, pool, CONFIG_BASE, CONFIG_SUITE)
    assert created["requalify_policy"] == "keep_serving"  # the default
    served = version_id(engine, serve(pool, "acme/rq-configured", base=CONFIG_BASE, suite=CONFIG_SUITE))
    node = fleets(pool).client("node-c")
    report(node, pool, "node-c", "0.32.0")
    assert pool_row(engine, pool).qualified_config_sha256 == config_sha256(config)
    assert marks(engine, pool) == []

    # A config can change only on the database today: what an operator's edit looks like.
    changed = {**config, "rope_theta": 20000.0}
    with unit_of_work(engine) as session:
        session.execute(update(BaseModel).where(BaseModel.name == CONFIG_BASE).values(config=changed))
    report(node, pool, "node-c", "0.32.0")
    (mark,) = marks(engine, pool, open_only=True)
    assert (mark.version_id, mark.cause, mark.target_sha256) == (served, "base_config", config_sha256(changed))
    listing = admin.get(f"/v1/pools/{pool}/requalifications").json()
    assert listing["marks"][0]["reason"] == (
        f"the base model's config changed: digest {config_sha256(config)[:12]}… → "
        f"{config_sha256(changed)[:12]}…")
    assert listing["base_config_sha256"] == config_sha256(changed)
    assert listing["qualified_config_sha256"] == config_sha256(config)
    report(node, pool, "node-c", "0.32.0")
    assert len(marks(engine, pool)) == 1  # marked once

    # Back to the config the version was qualified with: the mark has nothing left to prove.
    with unit_of_work(engine) as session:
        session.execute(update(BaseModel).where(BaseModel.name == CONFIG_BASE).values(config=config))
        base_id = session.scalar(select(BaseModel.id).where(BaseModel.name == CONFIG_BASE))
    with unit_of_work(engine) as session:
        observe_base_model(session, base_id)  # what a config-changing endpoint calls
    (cleared,) = marks(engine, pool)
    assert cleared.outcome == "superseded" and cleared.cleared_at is not None
    assert pool_row(engine, pool).qualified_config_sha256 == config_sha256(config)
    assert admin.get(f"/v1/pools/{pool}/requalifications").json()["marks"] == []
