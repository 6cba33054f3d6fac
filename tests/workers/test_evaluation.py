"""Versions are evaluated on a real vLLM: good ones pass, bad ones fail naming the metric."""

from __future__ import annotations

import json
import shutil

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from devkit.pipeline_steps import create_suite, upload_dir
from registry.tables import AuditEvent, Evaluation, EvaluationExample
from tests.support.asserts import assert_refused
from tests.support.evals import request_evaluation, wait_finished
from tests.support.metrics import metric_at

METRICS = {
    "exact_match": {"min": 0.8},
    "contains": {"min": 0.8},
    "reference_loglik": {"min_margin": 5.0},
    "parity": {"max_logprob_diff": 1e-3, "max_token_mismatch_rate": 0.0},
    "serving": {"min_throughput_ratio": 0.05, "prompts": 4},  # a short burst: serving is tested on its own
}


GATE_ROWS = 4
SUITE_ROWS = 16  # of the task kit's 32 (its adapters score 1.0 or 0.0 on each): five versions are evaluated on it


@pytest.fixture(scope="module")
def digits_suite(admin, kit_base, task_kit) -> str:
    return create_suite(admin, "digits", kit_base, task_kit.suites["digits_to_words"][:SUITE_ROWS], METRICS)["name"]


def test_good_adapter_passes_with_the_base_beside_every_metric(
        uploader, digits_suite, task_kit, eval_worker):
    version = upload_dir(uploader, "acme/digits", task_kit.adapters["digits_to_words"])
    requested = request_evaluation(uploader, version, digits_suite)
    assert requested["state"] == "queued" and requested["served_name"] == "acme/digits@1"

    result = wait_finished(uploader, requested["id"], examples_limit=10)

    assert result["state"] == "passed", result
    assert result["failing_metrics"] == [] and result["reason"] is None
    metrics = result["metrics"]
    assert set(metrics) == set(METRICS) and all(m["passed"] for m in metrics.values())
    assert metrics["exact_match"]["value"] >= 0.9 and metrics["exact_match"]["base"] <= 0.1
    assert metrics["reference_loglik"]["value"] - metrics["reference_loglik"]["base"] >= 5.0
    assert metrics["parity"]["value"] <= 1e-3
    assert metrics["serving"]["tokens_per_s"] > 0 and metrics["serving"]["base_ttft_ms"] > 0
    assert result["engine"]["vllm_version"] == "0.32.0"
    assert result["engine"]["flags"] == {"enable_lora": True, "max_loras": 4, "max_lora_rank": 16,
                                         "dtype": "float32"}
    assert {"base_generation_s", "adapter_generation_s", "parity_s"} <= set(result["timings"])
    version_now = uploader.get("/v1/adapters/acme/digits/versions/1").json()
    assert version_now["state"] == "evaluated"


def test_examples_are_paged_and_match_the_suite(uploader, digits_suite, task_kit, eval_worker):
    version = upload_dir(uploader, "acme/digits", task_kit.adapters["digits_to_words"])
    evaluation = request_evaluation_or_existing(uploader, version, digits_suite)
    finished = wait_finished(uploader, evaluation["id"])
    rows, cursor = [], None
    while True:
        params = {"examples_limit": 7, **({"examples_cursor": cursor} if cursor else {})}
        page = uploader.get(f"/v1/evaluations/{finished['id']}", params=params).json()["examples"]
        rows += page["items"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    suite_rows = task_kit.suites["digits_to_words"][:SUITE_ROWS]
    assert [(r["prompt"], r["reference"]) for r in rows] == [(s["prompt"], s["reference"]) for s in suite_rows]
    assert [r["position"] for r in rows] == list(range(len(suite_rows)))
    assert sum(r["exact_match"] for r in rows) / len(rows) == finished["metrics"]["exact_match"]["value"]
    assert all(r["parity_tokens_match"] for r in rows)


def request_evaluation_or_existing(client, version, suite):
    path = f"/v1/adapters/{version['tenant']}/{version['adapter']}/versions/{version['number']}/evaluations"
    response = client.post(path, json={"suite": suite})
    assert response.status_code in (200, 202), response.text
    return response.json()


@pytest.mark.parametrize(("artifact", "adapter"), [
    ("digits_to_words_noisy", "acme/digits-noisy"),   # weights scaled by noise
    ("reverse_words", "acme/reverse"),                # trained on another task
])
def test_bad_versions_fail_naming_the_failing_metrics(uploader, digits_suite, task_kit, eval_worker,
                                                      artifact, adapter, tokens):
    scraper = httpx.Client(headers={"Authorization": f"Bearer {tokens['scraper']}"})
    url = f"http://127.0.0.1:{eval_worker.env['LORAPLANE_METRICS_PORT']}/metrics"
    failed_before = metric_at(scraper, url, "loraplane_worker_evaluations_total", outcome="failed_metrics")
    missed_before = metric_at(scraper, url, "loraplane_worker_failing_metrics_total", metric="exact_match")
    version = upload_dir(uploader, adapter, task_kit.adapters[artifact])
    result = wait_finished(uploader, request_evaluation(uploader, version, digits_suite)["id"])
    assert result["state"] == "failed"
    assert "exact_match" in result["failing_metrics"]
    # The worker's own metrics tell it too, to a metrics token.
    assert metric_at(scraper, url, "loraplane_worker_evaluations_total", outcome="failed_metrics") \
        == failed_before + 1
    assert metric_at(scraper, url, "loraplane_worker_failing_metrics_total", metric="exact_match") \
        == missed_before + 1
    assert metric_at(scraper, url, "loraplane_worker_phase_seconds_count", phase="parity") >= 1
    assert result["reason"] == f"failed: {', '.join(result['failing_metrics'])}"
    assert result["metrics"]["exact_match"]["value"] < 0.8
    assert result["metrics"]["parity"]["passed"]  # served faithfully; it is just a bad adapter


def test_a_config_that_silently_changes_the_scaling_is_caught(
        uploader, digits_suite, task_kit, eval_worker, tmp_path):
    """Same weights, but lora_alpha 2 instead of 16: vLLM and peft both apply alpha/r, so
    nothing fails to load and the adapter answers, at an eighth of its trained strength. Its
    reference log-likelihood gains about 2 nats/token over the base instead of about 10."""
    folder = tmp_path / "alpha"
    shutil.copytree(task_kit.adapters["digits_to_words"], folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    config["lora_alpha"] = 2
    (folder / "adapter_config.json").write_text(json.dumps(config))
    version = upload_dir(uploader, "acme/digits-alpha", folder)
    assert version["lora_alpha"] == 2

    result = wait_finished(uploader, request_evaluation(uploader, version, digits_suite)["id"])

    assert result["state"] == "failed"
    assert "reference_loglik" in result["failing_metrics"], result["metrics"]


def test_a_folded_version_is_judged_against_its_upload(uploader, digits_suite, task_kit, eval_worker, tmp_path):
    """An alpha_pattern upload with fold_scaling: vLLM serves the derived bytes, and parity
    compares its tokens with peft's forward pass of the upload, the adapter as trained."""
    folder = tmp_path / "patterned"
    shutil.copytree(task_kit.adapters["digits_to_words"], folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    module = sorted(config["target_modules"])[-1]
    config["alpha_pattern"] = {module: config["lora_alpha"] * 1.25}
    (folder / "adapter_config.json").write_text(json.dumps(config))
    response = uploader.post("/v1/adapters/acme/digits-folded/versions", data={"fold_scaling": "true"},
                             files=[("file", (name, (folder / name).read_bytes()))
                                    for name in ("adapter_config.json", "adapter_model.safetensors")])
    assert response.status_code == 201, response.text
    version = response.json()
    assert version["derived_from"]["digest"] != version["digest"]

    result = wait_finished(uploader, request_evaluation(uploader, version, digits_suite)["id"])

    parity = result["metrics"]["parity"]
    assert parity["passed"] and parity["value"] <= 1e-3, result["metrics"]


def test_bad_requests_are_refused_and_nothing_is_queued(uploader, client_for, digits_suite, task_kit,
                                                        engine, admin, eval_worker):
    version = upload_dir(uploader, "acme/digits", task_kit.adapters["digits_to_words"])
    path = "/v1/adapters/acme/digits/versions/1/evaluations"

    def count() -> int:
        with Session(engine) as session:
            return session.scalar(select(func.count()).select_from(Evaluation))

    before = count()
    assert_refused(uploader.post(path, json={"suite": "nope"}), 404, "suite_not_found", "'nope'")
    assert_refused(uploader.post(path, json={"suite": "digits", "extra": 1}), 422, "invalid_request", "extra")
    assert_refused(uploader.post("/v1/adapters/acme/digits/versions/99/evaluations",
                                 json={"suite": "digits"}), 404, "version_not_found", "99")
    assert_refused(client_for("globex_uploader").post(path, json={"suite": "digits"}),
                   403, "forbidden", "tenant 'globex'")
    assert_refused(client_for("serving_node").post(path, json={"suite": "digits"}),
                   403, "forbidden", "role 'node'")
    assert_refused(client_for("none").post(path, json={"suite": "digits"}), 401, "unauthorized", "token")
    assert count() == before
    # Another tenant cannot read an evaluation, nor learn that it exists.
    listed = uploader.get(f"/v1/adapters/acme/digits/versions/{version['number']}/evaluations").json()
    evaluation_id = listed["items"][0]["id"]
    assert_refused(client_for("globex_admin").get(f"/v1/evaluations/{evaluation_id}"), 404,
                   "evaluation_not_found", str(evaluation_id))
    assert client_for("acme_reviewer").get(f"/v1/evaluations/{evaluation_id}").status_code == 200


def test_a_suite_for_another_base_is_refused(uploader, admin, base_model, digits_suite, make_adapter,
                                             engine):
    other = create_suite(admin, "random-base-suite", base_model,
                         [{"prompt": "a", "reference": "b"}], {"exact_match": {"min": 1}})
    folder = make_adapter(seed=5)
    version = upload_dir(uploader, "acme/random-base", folder)
    path = f"/v1/adapters/acme/random-base/versions/{version['number']}/evaluations"
    assert_refused(uploader.post(path, json={"suite": "digits"}), 422, "suite_base_mismatch", "'digits'")
    assert other["name"] == "random-base-suite"


def test_pools_required_suites_are_evaluated_on_upload(admin, uploader, task_kit, kit_base,
                                                       engine, eval_worker):
    # A small suite: the pool stays, and every later upload to the kit's base is evaluated on it.
    rows = task_kit.suites["digits_to_words"][:GATE_ROWS]
    digits_suite = create_suite(admin, "digits-gate", kit_base, rows, {"exact_match": {"min": 0.8}})["name"]
    pool = {"name": "kit-gated", "base_model": kit_base, "max_loras": 4, "max_cpu_loras": 8,
            "max_lora_rank": 16, "dtype": "float32", "required_suites": [digits_suite]}
    assert admin.post("/v1/pools", json=pool).status_code == 201
    version = upload_dir(uploader, "acme/digits-auto", task_kit.adapters["digits_to_words_v2"])
    assert version["state"] == "evaluating"
    listed = uploader.get("/v1/adapters/acme/digits-auto/versions/1/evaluations").json()["items"]
    required = {suite for p in admin.get("/v1/pools", params={"limit": 200}).json()["items"]
                if p["base_model"] == kit_base for suite in p["required_suites"]}  # other tests' pools too
    assert digits_suite in required and sorted(e["suite"] for e in listed) == sorted(required)
    listed = [e for e in listed if e["suite"] == digits_suite]
    result = wait_finished(uploader, listed[0]["id"])
    assert result["state"] == "passed", result
    assert uploader.get("/v1/adapters/acme/digits-auto/versions/1").json()["state"] == "evaluated"
    with Session(engine) as session:
        actions = set(session.scalars(select(AuditEvent.action)
                                      .where(AuditEvent.subject == "acme/digits-auto@1")))
        stored = session.scalar(select(func.count()).select_from(EvaluationExample)
                                .where(EvaluationExample.evaluation_id == listed[0]["id"]))
    assert {"adapter_version.upload", "evaluation.request", "evaluation.passed"} <= actions
    assert stored == GATE_ROWS
