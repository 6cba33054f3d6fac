"""An evaluation counts for a pool only if it ran on the engine the pool's nodes serve on: a
promotion whose evaluations ran on another vLLM version or dtype is blocked, and a mark for a new
engine clears only with evaluations that ran on that new engine."""

from __future__ import annotations

import itertools

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from devkit.pipeline_steps import evaluations_of, finish_evaluation, request_promotion, upload_dir
from registry.tables import Promotion
from tests.registry.requalification.support import (
    RQ_BASE, RQ_SUITE, declare, make_pool, marks, node_report, report, version_id,
)

POOL = "rq-engine-gate"
SERVES, OTHER = "0.32.0", "0.31.2"
seeds = itertools.count(900)


def ran_on(vllm_version: str, dtype: str = "bfloat16") -> dict:
    """The engine record a worker writes beside its outcome."""
    return {**node_report(vllm_version, dtype=dtype)["engine"], "url": "http://eval:8000", "served_base": RQ_BASE}


def qualified(admin, fleets, pool: str, vllm_version: str) -> None:
    """The operator declares the engine, and the pool's node reports it: the pool's qualified one."""
    declare(admin, pool, vllm_version)
    report(fleets(pool).client("node-a"), pool, "node-a", vllm_version)


@pytest.fixture(scope="module")
def pool(admin, requal_base, fleets):
    make_pool(admin, POOL, RQ_BASE, RQ_SUITE)
    qualified(admin, fleets, POOL, SERVES)  # vLLM 0.32.0, bfloat16
    assert admin.get(f"/v1/pools/{POOL}/requalifications").json()["qualified_engine"]["vllm_version"] == SERVES
    return POOL


@pytest.fixture
def uploaded(tiny_base, tmp_path, client_for, admin, pool):
    from devkit.tiny_model import build_adapter

    def run(name: str) -> dict:
        folder = build_adapter(tiny_base, tmp_path / name, r=8, lora_alpha=16, target_modules=("q_proj", "v_proj"),
                               seed=next(seeds), base_model_name=RQ_BASE)
        return upload_dir(client_for("acme_uploader"), f"acme/{name}", folder)
    return run


def promotions_of(engine, version: dict) -> list[Promotion]:
    with Session(engine) as session:
        return list(session.scalars(select(Promotion).where(Promotion.version_id == version_id(engine, version))))


@pytest.mark.parametrize(("engine_record", "why"), [
    (ran_on(OTHER), f"vLLM {OTHER}, not the pool's {SERVES}"),
    (ran_on(SERVES, dtype="float16"), "dtype float16, not the pool's bfloat16"),
])
def test_a_promotion_whose_evaluation_ran_on_another_engine_is_blocked(
        engine_record, why, uploaded, admin, client_for, engine, pool):
    version = uploaded(f"eng-gate-{engine_record['dtype']}-{engine_record['vllm_version'].replace('.', '')}")
    (evaluation,) = evaluations_of(admin, version)
    finish_evaluation(engine, evaluation["id"], engine_record=engine_record)

    refused = request_promotion(client_for("acme_uploader"), pool, version)
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["code"] == "gate_blocked"
    assert (f"[engine] evaluations of {version['served_name']} ran on another engine than pool {POOL!r} "
            f"serves on: {RQ_SUITE} (evaluation {evaluation['id']} ran on {why})") in error["message"]
    assert (f"Evaluate it again on a worker whose vLLM is {SERVES} with dtype bfloat16 (`loraplane eval run "
            f"{version['served_name']} --suite SUITE --again`).") in error["hint"]
    assert promotions_of(engine, version) == []  # nothing stored

    # Evaluated again on the pool's engine, the same version may be promoted.
    again = client_for("acme_uploader").post(
        f"/v1/adapters/acme/{version['adapter']}/versions/{version['number']}/evaluations", json={"suite": RQ_SUITE, "again": True})
    assert again.status_code == 202, again.text
    finish_evaluation(engine, again.json()["id"], engine_record=ran_on(SERVES))
    accepted = request_promotion(client_for("acme_uploader"), pool, version)
    assert accepted.status_code == 201, accepted.text
    gate = next(g for g in accepted.json()["gates"] if g["name"] == "engine")
    assert gate["passed"] and gate["message"] == f"its evaluations ran on the pool's engine (vLLM {SERVES})"
    client_for("acme_admin").post(f"/v1/promotions/{accepted.json()['id']}/reject", json={"comment": "done"})


def test_a_new_engines_mark_clears_only_with_an_evaluation_on_that_engine(
        serve, admin, client_for, engine, fleets, requal_base):
    pool = "rq-engine-marks"
    make_pool(admin, pool, RQ_BASE, RQ_SUITE)
    qualified(admin, fleets, pool, SERVES)
    version = serve(pool, "acme/eng-mark")  # evaluated on an engine it did not record
    qualified(admin, fleets, pool, "0.33.0")  # a new engine: the version is marked
    (mark,) = marks(engine, pool, open_only=True)
    finish_evaluation(engine, mark.evaluation_ids[0], engine_record=ran_on(SERVES))
    assert [m.id for m in marks(engine, pool, open_only=True)] == [mark.id]  # the old engine's pass: not enough

    again = client_for("acme_uploader").post(f"/v1/adapters/acme/eng-mark/versions/{version['number']}/evaluations",
                       json={"suite": RQ_SUITE, "again": True})
    assert again.status_code == 202, again.text
    finish_evaluation(engine, again.json()["id"], engine_record=ran_on("0.33.0"))
    assert marks(engine, pool, open_only=True) == []
    (cleared,) = marks(engine, pool)
    assert cleared.outcome == "requalified" and cleared.cleared_with == [again.json()["id"]]


def test_a_challenger_compared_on_another_engine_is_blocked(serve, admin, client_for, engine, fleets, requal_base,
                                                            tiny_base, tmp_path):
    """The pair that compares a challenger with production is held to the pool's engine too."""
    from devkit.tiny_model import build_adapter

    pool = "rq-engine-pairs"
    make_pool(admin, pool, RQ_BASE, RQ_SUITE)
    qualified(admin, fleets, pool, SERVES)
    serve(pool, "acme/eng-pair")  # version 1 in production
    uploader = client_for("acme_uploader")
    task = uploader.post("/v1/eval-suites", json={"name": "eng-pair-task", "tenant": "acme", "base_model": RQ_BASE,
                                                   "examples": [{"prompt": "1 =>", "reference": "one"}],
                                                   "metrics": {"exact_match": {"min": 0.5}}})
    assert task.status_code == 201, task.text
    assert uploader.put("/v1/adapters/acme/eng-pair/evaluation-policy",
                        json={"required_suites": ["acme/eng-pair-task"]}).status_code == 200
    folder = build_adapter(tiny_base, tmp_path / "pair-2", r=8, lora_alpha=16, target_modules=("q_proj", "v_proj"),
                           seed=next(seeds), base_model_name=RQ_BASE)
    version = upload_dir(uploader, "acme/eng-pair", folder)
    for evaluation in evaluations_of(admin, version):
        if evaluation["pair"]:  # both halves, on an engine the pool does not serve on
            finish_evaluation(engine, evaluation["pair"]["other_evaluation_id"], engine_record=ran_on(OTHER))
            finish_evaluation(engine, evaluation["id"], engine_record=ran_on(OTHER))
        else:
            finish_evaluation(engine, evaluation["id"], engine_record=ran_on(SERVES))

    refused = request_promotion(uploader, pool, version)

    assert refused.status_code == 422, refused.text
    assert (f"[challenger] acme/eng-pair@2 against acme/eng-pair@1, which it would replace: acme/eng-pair-task: "
            f"the comparison ran on vLLM {OTHER}, not the pool's {SERVES}") in refused.json()["error"]["message"]
    assert promotions_of(engine, version) == []
