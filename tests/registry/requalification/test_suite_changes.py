"""A global admin changes the suites a live pool requires: an added suite is queued at once for
every version the pool serves, and the gates require it from the next promotion on. A refused
change stores nothing, queues nothing and audits nothing."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from devkit.pipeline_steps import (
    create_suite, evaluations_of, finish_evaluation, request_promotion, upload_dir,
)
from registry.tables import AuditEvent, Evaluation
from tests.registry.requalification.support import (
    RQ_SUITE, audit_count, declare, make_pool, marks, register_base_with_suite, report,
)
from tests.support.asserts import assert_refused

BASE, POOL, MARKED_POOL = "suite-change-base", "suite-change", "suite-change-marked"
SUITE, REGRESSION = "suite-change-task", "suite-change-regression"


def suite_names(admin) -> list[str]:
    return admin.get(f"/v1/pools/{POOL}").json()["required_suites"]


def evaluation_count(engine) -> int:
    with Session(engine) as session:
        return session.scalar(select(func.count()).select_from(Evaluation))


def last_update(engine) -> AuditEvent:
    with Session(engine) as session:
        return session.scalar(select(AuditEvent).where(
            AuditEvent.action == "pool.update", AuditEvent.subject == f"pool/{POOL}")
            .order_by(AuditEvent.id.desc()).limit(1))


@pytest.fixture(scope="module")
def serving(admin, tiny_base, requal_base, serve):
    """A pool on a base of its own (an added suite is queued for every upload on the base), and
    one version in production there; a second global suite waits to be required."""
    register_base_with_suite(admin, tiny_base, BASE, SUITE)
    create_suite(admin, REGRESSION, BASE, [{"prompt": "3 4 =>", "reference": "three four"}],
                 {"exact_match": {"min": 0.5}})
    make_pool(admin, POOL, BASE, SUITE)
    own = admin.post("/v1/eval-suites", json={
        "name": "suite-change-own", "tenant": "acme", "base_model": BASE,
        "examples": [{"prompt": "5 =>", "reference": "five"}], "metrics": {"exact_match": {"min": 0.5}},
        "generation": {"max_tokens": 16}})
    assert own.status_code == 201, own.text
    return serve(POOL, "acme/suite-change-bot", base=BASE, suite=SUITE)


def test_an_added_suite_is_queued_for_production_and_gates_the_next_promotion(
        serving, admin, engine, client_for, tiny_base, tmp_path):
    from devkit.tiny_model import build_adapter

    changed = admin.patch(f"/v1/pools/{POOL}", json={"required_suites": [SUITE, REGRESSION]})
    assert changed.status_code == 200, changed.text
    assert changed.json()["required_suites"] == [SUITE, REGRESSION]
    assert changed.json()["requalify_policy"] == "keep_serving"  # left out, so kept

    # The version in production is evaluated on the added suite, not again on the old one.
    queued = [e for e in evaluations_of(admin, serving) if e["suite"] == REGRESSION]
    assert [e["state"] for e in queued] == ["queued"]
    assert [e["suite"] for e in evaluations_of(admin, serving)].count(SUITE) == 1
    event = last_update(engine)
    assert event.before == {"required_suites": [SUITE]}
    assert event.after == {"required_suites": [SUITE, REGRESSION], "evaluations": [queued[0]["id"]]}

    # The same change again queues and audits nothing.
    evaluations, updates = evaluation_count(engine), audit_count(engine, "pool.update", f"pool/{POOL}")
    assert admin.patch(f"/v1/pools/{POOL}", json={"required_suites": [SUITE, REGRESSION]}).status_code == 200
    assert evaluation_count(engine) == evaluations
    assert audit_count(engine, "pool.update", f"pool/{POOL}") == updates

    # A new version is evaluated on both at upload, and cannot be promoted until both passed.
    uploader = client_for("acme_uploader")
    folder = build_adapter(tiny_base, tmp_path / "v2", r=8, lora_alpha=16,
                           target_modules=("q_proj", "v_proj"), seed=771, base_model_name=BASE)
    second = upload_dir(uploader, "acme/suite-change-bot", folder)
    by_suite = {e["suite"]: e["id"] for e in evaluations_of(admin, second)}
    assert sorted(by_suite) == [REGRESSION, SUITE]
    finish_evaluation(engine, by_suite[SUITE])
    blocked = request_promotion(uploader, POOL, second)
    assert_refused(blocked, 422, "gate_blocked",
                   f"pool '{POOL}' requires suites that have not passed on "
                   f"acme/suite-change-bot@{second['number']}: {REGRESSION}")
    finish_evaluation(engine, by_suite[REGRESSION])
    assert request_promotion(uploader, POOL, second).status_code == 201

    # Dropping the suite again: the pool requires only the first, and nothing is queued.
    evaluations = evaluation_count(engine)
    dropped = admin.patch(f"/v1/pools/{POOL}", json={"required_suites": [SUITE]})
    assert dropped.status_code == 200 and dropped.json()["required_suites"] == [SUITE]
    assert evaluation_count(engine) == evaluations
    assert last_update(engine).after == {"required_suites": [SUITE], "evaluations": []}


def test_a_version_marked_to_qualify_again_gets_a_fresh_evaluation_of_an_added_suite(
        serving, admin, engine, serve, fleets, client_for):
    """A mark clears on evaluations that finished after it: a suite added meanwhile is queued
    afresh for the marked version, even one it passed before; dropping the suite clears a mark
    that waited only for it, at once."""
    make_pool(admin, MARKED_POOL, BASE, SUITE)
    version = serve(MARKED_POOL, "acme/suite-change-marked", base=BASE, suite=SUITE)
    path = f"/v1/adapters/acme/suite-change-marked/versions/{version['number']}/evaluations"
    finish_evaluation(engine, client_for("acme_uploader").post(path, json={"suite": REGRESSION}).json()["id"])
    node = fleets(MARKED_POOL).client("node-m")
    declare(admin, MARKED_POOL, "0.32.0")
    report(node, MARKED_POOL, "node-m", "0.32.0")  # the engine the pool qualifies on
    report(node, MARKED_POOL, "node-m", "0.32.0", enforce_eager=True)  # a flag changed
    declare(admin, MARKED_POOL, "0.32.0", enforce_eager=True)  # the operator confirms it: marked
    (mark,) = marks(engine, MARKED_POOL, open_only=True)

    assert admin.patch(f"/v1/pools/{MARKED_POOL}", json={"required_suites": [SUITE, REGRESSION]}).status_code == 200
    regression = [e["state"] for e in evaluations_of(admin, version) if e["suite"] == REGRESSION]
    assert regression == ["passed", "queued"]  # the pass from before the mark does not count for it
    finish_evaluation(engine, mark.evaluation_ids[0])  # the pool's first suite, after the mark
    assert [m.id for m in marks(engine, MARKED_POOL, open_only=True)] == [mark.id]  # the added one waits

    assert admin.patch(f"/v1/pools/{MARKED_POOL}", json={"required_suites": [SUITE]}).status_code == 200
    assert marks(engine, MARKED_POOL, open_only=True) == []
    assert marks(engine, MARKED_POOL)[-1].outcome == "requalified"


@pytest.mark.parametrize("body, status, code, message", [
    ({"required_suites": [SUITE, "no-such-suite"]}, 422, "unknown_suite", "unknown eval suite 'no-such-suite'"),
    ({"required_suites": [RQ_SUITE]}, 422, "suite_base_mismatch",
     f"eval suite '{RQ_SUITE}' is for another base model than '{BASE}'"),
    ({"required_suites": [SUITE, "acme/suite-change-own"]}, 422, "suite_not_global",
     "eval suite 'acme/suite-change-own' belongs to a tenant"),
    ({"required_suites": [SUITE, REGRESSION, SUITE]}, 422, "invalid_request",
     f"required_suites names '{SUITE}' more than once"),
    ({"required_suites": [""]}, 422, "invalid_request", "body.required_suites.0: String should have at least 1"),
    ({"required_suites": [f"s{i}" for i in range(33)]}, 422, "invalid_request",
     "body.required_suites: List should have at most 32 items"),
])
def test_a_refused_change_changes_nothing(serving, admin, engine, body, status, code, message):
    before, evaluations = suite_names(admin), evaluation_count(engine)
    updates = audit_count(engine, "pool.update", f"pool/{POOL}")
    assert_refused(admin.patch(f"/v1/pools/{POOL}", json=body), status, code, message)
    assert suite_names(admin) == before
    assert evaluation_count(engine) == evaluations
    assert audit_count(engine, "pool.update", f"pool/{POOL}") == updates


def test_only_a_global_admin_changes_them(serving, admin, client_for, engine):
    before, evaluations = suite_names(admin), evaluation_count(engine)
    refused = client_for("acme_admin").patch(f"/v1/pools/{POOL}", json={"required_suites": [SUITE, REGRESSION]})
    assert refused.status_code == 403, refused.text
    assert suite_names(admin) == before and evaluation_count(engine) == evaluations
