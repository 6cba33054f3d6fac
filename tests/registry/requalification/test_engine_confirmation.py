"""One node's report of a new engine never starts a round: a leaked node token reporting made-up
vLLM versions would otherwise mark, evaluate and (under `suspend`) withhold every tenant's
versions, and each new made-up version would start another round. A new engine needs a quorum of
the pool's live nodes, or an operator's declaration."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from registry.tables import AuditEvent, Pool
from tests.registry.requalification.support import (
    RQ_BASE, RQ_SUITE, audit_count, declare, deliveries, evaluation_rows, make_pool, marks, node_report, report,
    version_id,
)
from tests.support.asserts import assert_refused

POOL = "rq-confirm"


@pytest.fixture(scope="module")
def pool(admin, requal_base, serve, fleets, engine):
    make_pool(admin, POOL, RQ_BASE, RQ_SUITE, requalify_policy="suspend")
    versions = [serve(POOL, "acme/rq-confirmed"), serve(POOL, "globex/rq-confirmed", uploader="globex_uploader")]
    node = fleets(POOL).client("node-x")
    declare(admin, POOL, "0.32.0")
    report(node, POOL, "node-x", "0.32.0")  # the first engine: the qualified one
    return {"ids": {version_id(engine, v) for v in versions}, "node": node}


def active(admin) -> tuple[int, list[str]]:
    body = admin.get(f"/v1/pools/{POOL}/active-set").json()
    return body["generation"], sorted(e["served_name"] for e in body["entries"])


def declared(engine) -> list[str]:
    with Session(engine) as session:
        return session.scalar(select(Pool.declared_engines).where(Pool.name == POOL))


def test_made_up_engines_from_one_node_mark_evaluate_and_withhold_nothing(pool, admin, engine):
    before, evaluations = active(admin), len(evaluation_rows(engine, pool["ids"]))
    for made_up in ("9.9.9", "9.9.10", "10.0.0-evil"):
        report(pool["node"], POOL, "node-x", made_up)

    assert active(admin) == before  # the same generation, every version still served
    assert marks(engine, POOL) == [] and len(evaluation_rows(engine, pool["ids"])) == evaluations
    assert audit_count(engine, "requalification.mark", f"pool/{POOL}/") == 0
    assert deliveries(engine, "requalification.required", POOL) == []
    listing = admin.get(f"/v1/pools/{POOL}/requalifications").json()
    assert listing["qualified_engine"]["vllm_version"] == "0.32.0"
    [pending] = listing["pending_engines"]  # what the node reports now, and what would confirm it
    assert pending["vllm_version"] == "10.0.0-evil" and pending["nodes"] == ["node-x"]
    assert pending["nodes_needed"] == 2


def test_a_tenants_people_do_not_see_pending_engines(pool, client_for):
    assert client_for("acme_reviewer").get(f"/v1/pools/{POOL}/requalifications").json()["pending_engines"] == []


@pytest.mark.parametrize(("who", "body", "status", "code", "message"), [
    ("acme_admin", {"vllm_version": "0.33.0"}, 403, "forbidden", "role 'admin' may not do this"),
    ("serving_node", {"vllm_version": "0.33.0"}, 403, "forbidden", "role 'node' may not do this"),
    ("global_admin", {"vllm_version": "0.33 evil"}, 422, "invalid_request", "vllm_version"),
    ("global_admin", {"vllm_version": "0.33.0", "extra": 1}, 422, "invalid_request", "extra"),
    ("global_admin", {"dtype": "bfloat16"}, 422, "invalid_request", "vllm_version"),
])
def test_only_a_global_admin_declares_an_engine_and_bad_ones_change_nothing(
        pool, client_for, engine, who, body, status, code, message):
    before, events = declared(engine), _events(engine)
    assert_refused(client_for(who).post(f"/v1/pools/{POOL}/engines", json=body), status, code, message)
    assert declared(engine) == before and _events(engine) == events and marks(engine, POOL) == []


def test_a_declared_engine_starts_the_round_and_suspend_never_empties_the_pool(pool, admin, engine):
    before = active(admin)
    report(pool["node"], POOL, "node-x", "0.33.0")  # what the operator upgraded to
    declaring = admin.post(f"/v1/pools/{POOL}/engines", json=node_report("0.33.0")["engine"])

    assert declaring.status_code == 200, declaring.text
    assert len(declared(engine)) == 2 and declaring.json()["pending_engines"] == []
    made = marks(engine, POOL, open_only=True)
    assert sorted(m.version_id for m in made) == sorted(pool["ids"])
    assert all(m.marked_by == "system (re-qualification: a new engine declared by an operator; node "
               "node-x reported it)" for m in made)
    # Both versions are marked: under suspend they would all leave; the pool keeps serving them.
    assert active(admin)[1] == before[1]
    assert not any(m["suspended"] for m in declaring.json()["marks"])
    assert audit_count(engine, "pool.engine_declared", f"pool/{POOL}") == 2  # the first engine, then this one


def _events(engine) -> int:
    with Session(engine) as session:
        return session.scalar(select(func.count()).select_from(AuditEvent))


def test_a_pools_first_engine_from_one_node_is_pending_too(admin, requal_base, fleets, engine):
    """One leaked node token on a new pool cannot set the engine its versions count as
    qualified on."""
    make_pool(admin, "rq-first", RQ_BASE, RQ_SUITE)
    report(fleets("rq-first").client("node-first"), "rq-first", "node-first", "6.6.6-evil")

    listing = admin.get("/v1/pools/rq-first/requalifications").json()

    assert listing["qualified_engine"] is None
    assert [(p["vllm_version"], p["nodes"]) for p in listing["pending_engines"]] == [("6.6.6-evil", ["node-first"])]
    assert audit_count(engine, "pool.qualified_engine", "pool/rq-first") == 0
