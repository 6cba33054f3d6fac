"""A marked version qualifies again only when the suites of its own task pass as well as the
pool's: its adapter's evaluation policy counts in re-qualification as it does in the gates."""

from __future__ import annotations

from devkit.pipeline_steps import finish_evaluation
from registry.tables import Evaluation
from tests.registry.requalification.support import (
    RQ_BASE, RQ_SUITE, evaluation_rows, make_pool, marks, report, version_id,
)

POOL, TASK = "rq-own-task", "acme/rq-task"


def test_a_mark_requests_and_waits_for_the_adapters_own_suites_too(
        admin, requal_base, serve, fleets, engine, client_for):
    uploader = client_for("acme_uploader")
    make_pool(admin, POOL, RQ_BASE, RQ_SUITE)
    version = serve(POOL, "acme/rq-own")
    created = uploader.post("/v1/eval-suites", json={
        "name": "rq-task", "tenant": "acme", "base_model": RQ_BASE,
        "examples": [{"prompt": "1 =>", "reference": "one"}], "metrics": {"exact_match": {"min": 0.5}}})
    assert created.status_code == 201, created.text
    policy = uploader.put("/v1/adapters/acme/rq-own/evaluation-policy", json={"required_suites": [TASK]})
    assert policy.status_code == 200, policy.text
    node = fleets(POOL).client("node-own")
    report(node, POOL, "node-own", "0.32.0")

    report(node, POOL, "node-own", "0.32.0", enforce_eager=True)  # a flag changed: a round starts

    (mark,) = marks(engine, POOL, open_only=True)
    requested = {e.id: e for e in evaluation_rows(engine, {version_id(engine, version)})}
    by_suite = {suite_name(admin, requested[i]): i for i in mark.evaluation_ids}
    assert set(by_suite) == {RQ_SUITE, TASK}
    listing = admin.get(f"/v1/pools/{POOL}/requalifications").json()
    assert [s["suite"] for s in listing["marks"][0]["suites"]] == [RQ_SUITE, TASK]

    finish_evaluation(engine, by_suite[RQ_SUITE])
    report(node, POOL, "node-own", "0.32.0", enforce_eager=True)
    assert len(marks(engine, POOL, open_only=True)) == 1  # the pool's suite alone is not enough

    finish_evaluation(engine, by_suite[TASK])
    report(node, POOL, "node-own", "0.32.0", enforce_eager=True)
    assert marks(engine, POOL, open_only=True) == []
    (cleared,) = marks(engine, POOL)
    assert cleared.outcome == "requalified" and sorted(cleared.cleared_with) == sorted(by_suite.values())


def suite_name(admin, evaluation: Evaluation) -> str:
    return admin.get(f"/v1/evaluations/{evaluation.id}").json()["suite"]
