"""The dashboard in real Chromium (tests/support/browser.py) against the session's registry,
with a version that the real eval engine has evaluated and that awaits approval."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest

from devkit.pipeline_steps import create_suite, evaluations_of, request_promotion, upload_dir
from tests.support.browser import browser, open_as, shoot  # noqa: F401 (fixtures, and shoot for the modules here)
from tests.support.evals import wait_finished

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("LORAPLANE_TEST_ARTIFACTS", REPO / "test-artifacts")) / "dashboard"
POOL, SUITE = "web-pool", "web-digits"
SUITE_ROWS = 16  # of the task kit's 32: the page shows each; the evaluation takes half as long
METRICS = {"exact_match": {"min": 0.8}, "contains": {"min": 0.8}, "reference_loglik": {"min_margin": 5.0},
           "parity": {"max_logprob_diff": 1e-3, "max_token_mismatch_rate": 0.0},
           "serving": {"min_throughput_ratio": 0.05, "prompts": 4}}


@pytest.fixture(scope="session")
def screenshots() -> Path:
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    return ARTIFACTS


@pytest.fixture(scope="module")
def awaiting(admin: httpx.Client, uploader: httpx.Client, kit_base: str, task_kit, eval_worker) -> dict:
    """acme/web-digits@1, evaluated by the worker on the real eval engine (the pool requires the
    suite, so the upload asks for it), and its promotion to web-pool awaiting approval."""
    create_suite(admin, SUITE, kit_base, task_kit.suites["digits_to_words"][:SUITE_ROWS], METRICS)
    created = admin.post("/v1/pools", json={"name": POOL, "base_model": kit_base, "max_loras": 2,
                                            "max_cpu_loras": 4, "max_lora_rank": 16, "dtype": "float32",
                                            "required_suites": [SUITE]})
    assert created.status_code == 201, created.text
    version = upload_dir(uploader, "acme/web-digits", task_kit.adapters["digits_to_words"])
    evaluations = [e for e in evaluations_of(uploader, version) if e["suite"] == SUITE]
    assert evaluations, "the upload did not ask for the pool's required suite"
    assert wait_finished(uploader, evaluations[0]["id"])["state"] == "passed"
    promotion = request_promotion(uploader, POOL, version)
    assert promotion.status_code == 201, promotion.text
    assert promotion.json()["state"] == "awaiting_approval"
    return {"version": version, "promotion": promotion.json()}
