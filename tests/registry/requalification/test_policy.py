"""The pool's policy: under `suspend`, marked versions leave the active set until they qualify
again, though never every version at once; under `keep_serving` they stay. Only a global admin changes it, and only to a known value."""

from __future__ import annotations

from typing import get_args

import pytest
from sqlalchemy.orm import Session

from registry.active_set.reading.suspension import POLICIES
from registry.pools.schemas import RequalifyPolicy
from registry.requalification.service import suspended_version_ids
from tests.registry.requalification.support import (
    RQ_BASE, RQ_SUITE, audit_count, declare, make_pool, marks, pool_row, report, version_id,
)
from devkit.pipeline_steps import finish_evaluation
from tests.support.asserts import assert_refused

POOL = "rq-suspend"
POLICY_ERROR = "body.requalify_policy: Input should be 'keep_serving' or 'suspend'"


def active_names(admin) -> set[str]:
    return {e["served_name"] for e in admin.get(f"/v1/pools/{POOL}/active-set").json()["entries"]}


def suspended(engine) -> set[int]:
    with Session(engine) as session:
        return suspended_version_ids(session, pool_row(engine, POOL).id)


@pytest.fixture(scope="module")
def suspending(admin, requal_base, serve, fleets, engine):
    created = make_pool(admin, POOL, RQ_BASE, RQ_SUITE, requalify_policy="suspend")
    version = serve(POOL, "globex/rq-held", uploader="globex_uploader")
    node = fleets(POOL).client("node-s")
    declare(admin, POOL, "0.32.0")
    report(node, POOL, "node-s", "0.32.0")
    return {"created": created, "version": version, "id": version_id(engine, version), "node": node}


def test_suspend_never_empties_the_pool_and_leaves_marked_versions_out_beside_qualified_ones(
        suspending, engine, admin, serve):
    assert suspending["created"]["requalify_policy"] == "suspend"
    assert suspended(engine) == set()  # nothing is marked yet
    served = suspending["version"]["served_name"]
    assert served in active_names(admin)

    report(suspending["node"], POOL, "node-s", "0.32.0", enforce_eager=True)  # a flag changed
    declare(admin, POOL, "0.32.0", enforce_eager=True)  # the operator confirms it: a round starts
    assert len(marks(engine, POOL, open_only=True)) == 1
    # Every version of the pool is marked: suspending them would empty it, so they keep serving.
    assert suspended(engine) == set() and served in active_names(admin)
    assert not admin.get(f"/v1/pools/{POOL}/requalifications").json()["marks"][0]["suspended"]

    generation = pool_row(engine, POOL).generation
    fresh = serve(POOL, "globex/rq-fresh", uploader="globex_uploader")  # promoted since: not marked
    assert suspended(engine) == {suspending["id"]}
    assert served not in active_names(admin) and fresh["served_name"] in active_names(admin)
    # The active set lost a version: nodes must hear of it, so the generation moved.
    assert pool_row(engine, POOL).generation > generation
    listing = admin.get(f"/v1/pools/{POOL}/requalifications").json()
    assert listing["marks"][0]["suspended"] and listing["marks"][0]["reason"].endswith(
        "; flags changed: enforce_eager")

    # Switching to keep_serving brings it back at once, again with a new generation.
    generation = pool_row(engine, POOL).generation
    changed = admin.patch(f"/v1/pools/{POOL}", json={"requalify_policy": "keep_serving"})
    assert changed.status_code == 200 and changed.json()["requalify_policy"] == "keep_serving"
    assert suspended(engine) == set() and pool_row(engine, POOL).generation > generation
    assert served in active_names(admin)
    assert not admin.get(f"/v1/pools/{POOL}/requalifications").json()["marks"][0]["suspended"]
    assert audit_count(engine, "pool.update", f"pool/{POOL}") == 1

    assert admin.patch(f"/v1/pools/{POOL}", json={"requalify_policy": "suspend"}).status_code == 200
    assert suspended(engine) == {suspending["id"]}

    assert served not in active_names(admin)
    (mark,) = marks(engine, POOL, open_only=True)
    generation = pool_row(engine, POOL).generation
    finish_evaluation(engine, mark.evaluation_ids[0])  # recording the outcome clears the mark
    assert suspended(engine) == set() and pool_row(engine, POOL).generation > generation
    assert served in active_names(admin)
    (cleared,) = marks(engine, POOL)[-1:]
    assert cleared.outcome == "requalified" and cleared.cleared_with == mark.evaluation_ids


def test_the_policy_values_are_the_rules_values():
    assert get_args(RequalifyPolicy) == POLICIES


@pytest.mark.parametrize(("who", "method", "path", "body", "status", "code", "message"), [
    ("global_admin", "patch", f"/v1/pools/{POOL}", {"requalify_policy": "pause"}, 422,
     "invalid_request", POLICY_ERROR),
    ("global_admin", "patch", f"/v1/pools/{POOL}", {}, 422, "invalid_request",
     "body: Value error, give requalify_policy, required_suites, canary_min_routers, overflow, cold_tier_bytes or several"),
    ("global_admin", "patch", f"/v1/pools/{POOL}", {"requalify_policy": "suspend", "max_loras": 9},
     422, "invalid_request", "body.max_loras: Extra inputs are not permitted"),
    ("global_admin", "patch", "/v1/pools/no-such-pool", {"requalify_policy": "suspend"}, 404,
     "pool_not_found", "pool 'no-such-pool' does not exist"),
    ("acme_admin", "patch", f"/v1/pools/{POOL}", {"requalify_policy": "keep_serving"}, 403,
     "forbidden", "role 'admin' may not do this; it needs a global admin"),
    ("global_admin", "post", "/v1/pools", {"name": "rq-bad-policy", "base_model": RQ_BASE,
                                           "max_loras": 2, "max_cpu_loras": 8, "max_lora_rank": 16,
                                           "requalify_policy": "pause"},
     422, "invalid_request", POLICY_ERROR),
])
def test_a_bad_policy_change_is_refused_and_changes_nothing(
        suspending, client_for, admin, engine, who, method, path, body, status, code, message):
    before = admin.get(f"/v1/pools/{POOL}").json()
    updates = audit_count(engine, "pool.update", f"pool/{POOL}")
    generation = pool_row(engine, POOL).generation

    response = getattr(client_for(who), method)(path, json=body)

    assert_refused(response, status, code, message)
    assert response.json()["error"]["message"] == message
    assert admin.get(f"/v1/pools/{POOL}").json() == before
    assert admin.get("/v1/pools/rq-bad-policy").status_code == 404
    assert audit_count(engine, "pool.update", f"pool/{POOL}") == updates
    assert pool_row(engine, POOL).generation == generation
    assert admin.get("/readyz").status_code == 200
