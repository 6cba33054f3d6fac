"""Faults: a worker killed mid-evaluation, an engine that is down, a rank the engine refuses."""

from __future__ import annotations

import json
import shutil
import time

import httpx
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from devkit import services
from devkit.pipeline_steps import create_suite, upload_dir
from devkit.services import wait_for
from registry.tables import AuditEvent, Evaluation, EvaluationExample
from tests.conftest import register_base
from tests.support.eval_stack import KIT_BASE, Worker, worker_env
from tests.support.evals import request_evaluation, wait_finished, wait_idle
from tests.support.metrics import metric


def evaluation_row(engine, evaluation_id: int) -> Evaluation:
    with Session(engine) as session:
        return session.get(Evaluation, evaluation_id)


def test_a_worker_killed_mid_evaluation_is_redelivered_and_records_one_result(
        admin, uploader, kit_base, task_kit, engine, eval_worker, eval_engine):
    # Long outputs (192 tokens, past eos) keep the engine generating for seconds: with 64, a
    # quick batch could finish its generations before the test saw one running.
    rows = task_kit.suites["digits_to_words"][:12]  # evaluated twice: killed, then redelivered
    create_suite(admin, "digits-long", kit_base, rows,
                 {"exact_match": {"min": 0.0}, "parity": {"max_logprob_diff": 1e-3}},
                 max_tokens=192, ignore_eos=True)
    version = upload_dir(uploader, "acme/digits-killed", task_kit.adapters["digits_to_words"])
    wait_idle(engine, kit_base)
    evaluation_id = request_evaluation(uploader, version, "digits-long")["id"]
    deadline = time.monotonic() + 60
    while evaluation_row(engine, evaluation_id).state != "running":
        assert time.monotonic() < deadline, "the worker never claimed the evaluation"
        time.sleep(0.05)  # the poll interval
    with httpx.Client(base_url=eval_engine.url) as vllm:  # mid-evaluation: the engine generates
        wait_for(lambda: metric(vllm, "vllm:num_requests_running") > 0, timeout_s=60,
                 what="the engine to run the evaluation's requests")

    eval_worker.kill()  # SIGKILL to the whole worker: no chance to acknowledge or clean up

    assert evaluation_row(engine, evaluation_id).state == "running"
    eval_worker.restart()
    result = wait_finished(uploader, evaluation_id)
    assert result["state"] == "passed", result
    assert result["attempts"] == 2  # the killed claim, then the redelivered one
    with Session(engine) as session:
        positions = list(session.scalars(select(EvaluationExample.position)
                                         .where(EvaluationExample.evaluation_id == evaluation_id)))
        outcomes = session.scalar(select(func.count()).select_from(AuditEvent).where(
            AuditEvent.action.in_(("evaluation.passed", "evaluation.failed")),
            AuditEvent.after["evaluation"].as_integer() == evaluation_id))
    assert sorted(positions) == list(range(len(rows)))
    assert outcomes == 1


def test_an_engine_that_is_down_is_retried_then_fails_with_a_clear_reason(
        admin, uploader, service_dir, database_url, s3, redis, task_kit, tmp_path):
    offline = register_base(admin, f"{KIT_BASE}-offline", task_kit.base_dir)
    create_suite(admin, "digits-offline", offline, task_kit.suites["digits_to_words"][:4],
                 {"exact_match": {"min": 0.5}})
    folder = tmp_path / "adapter"
    shutil.copytree(task_kit.adapters["digits_to_words"], folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = offline
    (folder / "adapter_config.json").write_text(json.dumps(config))
    version = upload_dir(uploader, "acme/digits-offline", folder)
    closed_port = services.free_port()  # nothing listens here
    env = worker_env(database_url, s3, redis, engine_url=f"http://127.0.0.1:{closed_port}", base=offline,
                     LORAPLANE_MAX_ATTEMPTS="3", LORAPLANE_RETRY_BACKOFF_S="0.5",
                     LORAPLANE_RETRY_BACKOFF_MAX_S="1")
    worker = Worker(service_dir / "worker-offline", env, "offline")
    try:
        started = time.monotonic()
        result = wait_finished(uploader, request_evaluation(uploader, version, "digits-offline")["id"],
                               timeout_s=120)
        took = time.monotonic() - started
    finally:
        worker.stop()
    assert result["state"] == "failed"
    assert result["attempts"] == 3
    assert f"engine at http://127.0.0.1:{closed_port} unreachable: ConnectError" in result["reason"]
    assert "gave up after 3 attempts" in result["reason"]
    assert took >= 0.5 + 1  # it backed off between attempts instead of failing at once
    assert result["metrics"] == {} and result["examples"]["items"] == []


def test_a_rank_above_the_engines_maximum_fails_cleanly(uploader, task_kit, kit_base, eval_engine,
                                                        eval_worker, admin, tmp_path):
    from devkit.tiny_model import build_adapter

    create_suite(admin, "digits-rank", kit_base, task_kit.suites["digits_to_words"][:4],
                 {"exact_match": {"min": 0.0}})
    folder = build_adapter(task_kit.base_dir, tmp_path / "r32", r=32, lora_alpha=64, seed=3,
                           base_model_name=kit_base)
    version = upload_dir(uploader, "acme/rank-32", folder)
    assert version["rank"] == 32

    result = wait_finished(uploader, request_evaluation(uploader, version, "digits-rank")["id"])

    assert result["state"] == "failed"
    assert result["reason"].startswith("rank 32 exceeds the engine's max_lora_rank 16")
    assert result["failing_metrics"] == []
    assert httpx.get(f"{eval_engine.url}/health").status_code == 200
    models = httpx.get(f"{eval_engine.url}/v1/models").json()["data"]
    assert "acme/rank-32@1" not in {m["id"] for m in models}
