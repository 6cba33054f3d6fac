"""Champion and challenger on the real eval engine: a new version is evaluated beside the one in
production, in one batch, on the adapter's own suite (its tenant's), and the challenger gate
compares them; the dashboard shows the two side by side, example by example."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import expect

from devkit.pipeline_steps import create_suite, evaluations_of, request_promotion, upload_dir
from tests.support.asserts import assert_refused
from tests.support.evals import wait_finished
from tests.web.conftest import shoot

POOL, ADAPTER, TASK, PARITY = "champion-pool", "acme/champion", "acme/digits-task", "champion-parity"
EXAMPLES = 12


@pytest.fixture(scope="module")
def champion(admin: httpx.Client, uploader: httpx.Client, kit_base: str, task_kit, eval_worker) -> dict:
    """acme/champion@1 (the good digits adapter) in production, with acme's own suite as its
    policy; the suite's thresholds are low, so that only the comparison can block a challenger."""
    suite = {"name": "digits-task", "tenant": "acme", "base_model": kit_base,
             "examples": task_kit.suites["digits_to_words"][:EXAMPLES],
             "metrics": {"exact_match": {"min": 0.0}, "parity": {"max_logprob_diff": 1e-3}},
             "generation": {"max_tokens": 16}}
    assert uploader.post("/v1/eval-suites", json=suite).status_code == 201
    # The parity gate passes only on a global suite: a tenant's own may fail it, never pass it alone.
    create_suite(admin, PARITY, kit_base, task_kit.suites["digits_to_words"][:4],
                 {"parity": {"max_logprob_diff": 1e-3}})
    created = admin.post("/v1/pools", json={"name": POOL, "base_model": kit_base, "max_loras": 2,
                                            "max_cpu_loras": 4, "max_lora_rank": 16, "dtype": "float32",
                                            "required_suites": [PARITY]})
    assert created.status_code == 201, created.text
    version = upload_dir(uploader, ADAPTER, task_kit.adapters["digits_to_words"])
    policy = uploader.put(f"/v1/adapters/{ADAPTER}/evaluation-policy", json={"required_suites": [TASK]})
    assert policy.status_code == 200, policy.text
    own = uploader.post(f"/v1/adapters/{ADAPTER}/versions/1/evaluations", json={"suite": TASK})
    assert wait_finished(uploader, own.json()["id"])["state"] == "passed"
    (parity,) = [e for e in evaluations_of(uploader, version) if e["suite"] == PARITY]
    assert wait_finished(uploader, parity["id"])["state"] == "passed"
    promotion = request_promotion(uploader, POOL, version)
    assert promotion.status_code == 201, promotion.text
    approved = admin.post(f"/v1/promotions/{promotion.json()['id']}/approve", json={"comment": "first"})
    assert approved.status_code == 200, approved.text
    return version


def evaluate_challenger(uploader: httpx.Client, folder) -> tuple[dict, dict, dict]:
    """Upload a new version: (version, its finished evaluation, the incumbent's beside it)."""
    version = upload_dir(uploader, ADAPTER, folder)
    queued = [e for e in evaluations_of(uploader, version) if e["suite"] == TASK]  # other pools' too
    assert len(queued) == 1 and queued[0]["pair"]["role"] == "challenger", queued
    mine = wait_finished(uploader, queued[0]["id"], examples_limit=EXAMPLES)
    theirs = wait_finished(uploader, mine["pair"]["other_evaluation_id"], examples_limit=EXAMPLES)
    for evaluation in evaluations_of(uploader, version):  # the pool's own suite: parity
        if evaluation["suite"] == PARITY:
            assert wait_finished(uploader, evaluation["id"])["state"] == "passed"
    return version, mine, theirs


def test_a_worse_challenger_is_blocked_with_both_scores_from_one_batch(champion, uploader, task_kit, engine):
    version, mine, theirs = evaluate_challenger(uploader, task_kit.adapters["digits_to_words_noisy"])

    assert theirs["served_name"] == "acme/champion@1" and theirs["pair"]["role"] == "incumbent"
    # One claim took both: the same engine, started together.
    assert mine["started_at"] == theirs["started_at"] and mine["engine"] == theirs["engine"]
    assert mine["metrics"]["exact_match"]["value"] <= 0.1 and theirs["metrics"]["exact_match"]["value"] >= 0.9
    assert mine["state"] == "passed"  # the suite alone would let it through

    response = request_promotion(uploader, POOL, version)

    worse, better = mine["metrics"]["exact_match"]["value"], theirs["metrics"]["exact_match"]["value"]
    assert_refused(response, 422, "gate_blocked",
                   f"[challenger] acme/champion@{version['number']} against acme/champion@1, which it would "
                   f"replace: {TASK}: exact_match {worse:.4g} vs {better:.4g} for acme/champion@1, worse by "
                   "more than the margin 0")
    assert {d["name"] for d in response.json()["error"]["details"]} == {"challenger"}


def test_a_challenger_as_good_passes_and_the_dashboard_shows_both_side_by_side(
        champion, uploader, task_kit, open_as, screenshots):
    version, mine, theirs = evaluate_challenger(uploader, task_kit.adapters["digits_to_words_v2"])

    response = request_promotion(uploader, POOL, version)

    assert response.status_code == 201, response.text
    gate = {g["name"]: g for g in response.json()["gates"]}["challenger"]
    score, incumbent = mine["metrics"]["exact_match"]["value"], theirs["metrics"]["exact_match"]["value"]
    assert gate["passed"] and gate["message"] == (
        f"not worse than acme/champion@1: {TASK}: exact_match {score:.4g} vs {incumbent:.4g}")

    page = open_as("acme_reviewer")
    page.goto(f"/ui/adapters/{ADAPTER}/versions/{version['number']}")
    comparison = page.get_by_role("region", name="Comparison with acme/champion@1")
    expect(comparison).to_contain_text(f"evaluation {theirs['id']}")
    expect(comparison.get_by_role("row").filter(has_text="exact_match")).to_contain_text(f"{score:.4g}")
    rows = comparison.locator("table.examples tbody tr")
    expect(rows).to_have_count(EXAMPLES)
    first = mine["examples"]["items"][0]
    expect(rows.first).to_contain_text(first["output"].strip())
    expect(rows.first).to_contain_text(theirs["examples"]["items"][0]["output"].strip())
    shoot(page, screenshots, "10-challenger-beside-incumbent")
