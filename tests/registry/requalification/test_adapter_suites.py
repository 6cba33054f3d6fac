"""A marked version qualifies again only when the suites of its own task pass as well as the
pool's: its adapter's evaluation policy counts in re-qualification as it does in the gates. Its
half of a challenger's comparison does not count: it measures the task metrics only."""

from __future__ import annotations

from devkit.pipeline_steps import evaluations_of, finish_evaluation, upload_dir
from devkit.tiny_model import build_adapter
from registry.tables import Evaluation
from tests.registry.requalification.support import (
    RQ_BASE, RQ_SUITE, declare, evaluation_rows, make_pool, marks, report, version_id,
)

POOL, TASK = "rq-own-task", "acme/rq-task"
HALF_POOL, HALF_TASK = "rq-half", "acme/rq-half-task"


def test_a_mark_requests_and_waits_for_the_adapters_own_suites_too(
        admin, requal_base, serve, fleets, engine, client_for):
    uploader = client_for("acme_uploader")
    make_pool(admin, POOL, RQ_BASE, RQ_SUITE)
    version = serve(POOL, "acme/rq-own")
    require_own_suite(uploader, "acme/rq-own", TASK)
    node = fleets(POOL).client("node-own")
    declare(admin, POOL, "0.32.0")  # the pool's first engine, as its operator says
    report(node, POOL, "node-own", "0.32.0")

    report(node, POOL, "node-own", "0.32.0", enforce_eager=True)  # a flag changed
    declare(admin, POOL, "0.32.0", enforce_eager=True)  # the operator confirms it: a round starts

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


def test_an_incumbents_half_of_a_comparison_neither_requalifies_it_nor_stands_for_its_own(
        admin, requal_base, serve, fleets, engine, client_for, tiny_base, tmp_path):
    uploader = client_for("acme_uploader")
    make_pool(admin, HALF_POOL, RQ_BASE, RQ_SUITE)
    serve(HALF_POOL, "acme/rq-half")
    require_own_suite(uploader, "acme/rq-half", HALF_TASK)
    node = fleets(HALF_POOL).client("node-half")
    declare(admin, HALF_POOL, "0.32.0")
    report(node, HALF_POOL, "node-half", "0.32.0")
    report(node, HALF_POOL, "node-half", "0.32.0", enforce_eager=True)
    declare(admin, HALF_POOL, "0.32.0", enforce_eager=True)  # a round starts
    (mark,) = marks(engine, HALF_POOL, open_only=True)
    own = {suite_name(admin, e): e.id for e in evaluation_rows(engine, {mark.version_id})
           if e.id in mark.evaluation_ids}
    finish_evaluation(engine, own[RQ_SUITE])

    # A challenger's upload pairs it with the marked version, in production, on the task suite.
    folder = build_adapter(tiny_base, tmp_path / "challenger", r=8, lora_alpha=16,
                           target_modules=("q_proj", "v_proj"), seed=799, base_model_name=RQ_BASE)
    challenger = upload_dir(uploader, "acme/rq-half", folder)
    (paired,) = [e for e in evaluations_of(admin, challenger) if e["suite"] == HALF_TASK]
    half = paired["pair"]["other_evaluation_id"]
    finish_evaluation(engine, half)  # the incumbent's half passes its task metrics
    report(node, HALF_POOL, "node-half", "0.32.0", enforce_eager=True)

    assert len(marks(engine, HALF_POOL, open_only=True)) == 1
    again = uploader.post("/v1/adapters/acme/rq-half/versions/1/evaluations", json={"suite": HALF_TASK})
    assert again.status_code == 200 and again.json()["id"] == own[HALF_TASK], again.text

    finish_evaluation(engine, own[HALF_TASK])
    report(node, HALF_POOL, "node-half", "0.32.0", enforce_eager=True)
    (cleared,) = marks(engine, HALF_POOL)
    assert cleared.outcome == "requalified" and sorted(cleared.cleared_with) == sorted(own.values())


def require_own_suite(uploader, adapter: str, suite: str) -> None:
    """Create the tenant's one-example task suite `suite` and make it the adapter's own."""
    created = uploader.post("/v1/eval-suites", json={
        "name": suite.split("/", 1)[1], "tenant": "acme", "base_model": RQ_BASE,
        "examples": [{"prompt": "1 =>", "reference": "one"}], "metrics": {"exact_match": {"min": 0.5}}})
    assert created.status_code == 201, created.text
    policy = uploader.put(f"/v1/adapters/{adapter}/evaluation-policy", json={"required_suites": [suite]})
    assert policy.status_code == 200, policy.text


def suite_name(admin, evaluation: Evaluation) -> str:
    return admin.get(f"/v1/evaluations/{evaluation.id}").json()["suite"]
