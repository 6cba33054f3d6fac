"""Every option the promotion, suite and evaluation APIs take can be given from the command line:
a canary's whole analysis policy, the digest a reviewer approves, the tenant a listing is for,
ignore_eos and the examples' cursor. Each is checked in what the registry stored, and each
refusal leaves nothing behind."""

from __future__ import annotations

import json
import secrets

import pytest

from devkit.pipeline_steps import evaluations_of
from tests.support.cli import cli
from tests.support.promotions import promote


@pytest.fixture(scope="module")
def canary_ready(promo_pools, make_ready, uploader, second_reviewer):
    """acme/cli-opts-bot: version 1 in production in the open pool, version 2 ready for a canary."""
    first = make_ready("cli-opts-bot")
    promote(uploader, second_reviewer, promo_pools["open"], first)
    return make_ready("cli-opts-bot")


def promotions_of(admin, pool: str) -> list[dict]:
    return admin.get("/v1/promotions", params={"pool": pool, "limit": 200}).json()["items"]


def test_a_canarys_whole_analysis_policy_is_given_on_the_command_line(
        registry, tokens, admin, promo_pools, canary_ready):
    pool = promo_pools["open"]
    requested = cli("promotion", "request", pool, "acme/cli-opts-bot@2", "--alias", "canary",
                    "--steps", "5,50", "--max-error-rate-increase", "0.01",
                    "--min-tokens-per-s-ratio", "0.8", "--max-ttft-p95-ratio", "off",
                    "--max-latency-p95-ratio", "3", token=tokens["acme_uploader"], url=registry.url)

    assert requested.returncode == 0, requested.stderr
    stored = admin.get(f"/v1/promotions/{json.loads(requested.stdout)['id']}").json()
    assert stored["analysis"]["max_error_rate_increase"] == 0.01
    assert stored["analysis"]["min_tokens_per_s_ratio"] == 0.8
    assert stored["analysis"]["max_ttft_p95_ratio"] is None  # off: not checked
    assert stored["analysis"]["max_latency_p95_ratio"] == 3.0
    assert [s["weight"] for s in stored["analysis"]["steps"]] == [5, 50] and stored["weight"] == 5
    rejected = cli("promotion", "reject", str(stored["id"]), "--comment", "only checking options",
                   token=tokens["global_admin"], url=registry.url)
    assert rejected.returncode == 0, rejected.stderr


@pytest.mark.parametrize(("args", "status", "message"), [
    (["--steps", "5,50", "--min-tokens-per-s-ratio", "0"], 1,
     "--min-tokens-per-s-ratio 0.0 must be above 0 and at most 1000"),
    (["--steps", "5,50", "--max-ttft-p95-ratio", "fast"], 1, "--max-ttft-p95-ratio 'fast' is not a number"),
    (["--steps", "5,50", "--max-latency-p95-ratio", "1001"], 1, "--max-latency-p95-ratio 1001 must be above 0"),
    (["--steps", "5,50", "--max-error-rate-increase", "1.5"], 2,
     "Invalid value for '--max-error-rate-increase': Input should be less than or equal to 1"),
    (["--weight", "5", "--max-error-rate-increase", "0.01"], 1,
     "--max-error-rate-increase judge a canary's analysis, which needs --steps"),
    (["--weight", "5", "--min-tokens-per-s-ratio", "0.9"], 1,
     "--min-tokens-per-s-ratio judge a canary's analysis, which needs --steps"),
])
def test_a_canary_option_out_of_the_apis_bounds_is_refused_and_nothing_is_requested(
        registry, tokens, admin, promo_pools, canary_ready, args, status, message):
    pool = promo_pools["open"]
    before = promotions_of(admin, pool)

    refused = cli("promotion", "request", pool, "acme/cli-opts-bot@2", "--alias", "canary", *args,
                  token=tokens["acme_uploader"], url=registry.url)

    assert refused.returncode == status, refused.stderr
    assert message in " ".join(refused.stderr.replace("│", " ").split())  # as wrapped in a box or not
    assert promotions_of(admin, pool) == before


def test_approve_with_the_digest_reviewed_and_list_by_tenant(registry, tokens, admin, promo_pools, make_ready):
    pool = promo_pools["open"]
    version = make_ready("cli-digest-bot")
    requested = cli("promotion", "request", pool, "acme/cli-digest-bot@1", token=tokens["acme_uploader"],
                    url=registry.url)
    promotion_id = str(json.loads(requested.stdout)["id"])

    def approve(*args: str):
        return cli("promotion", "approve", promotion_id, "--comment", "reviewed", *args,
                   token=tokens["global_admin"], url=registry.url)

    malformed = approve("--digest", "abc")
    assert malformed.returncode == 1 and "--digest 'abc' is not a sha256 digest" in malformed.stderr
    other = approve("--digest", "0" * 64)
    assert other.returncode == 1 and "(evaluated_bytes_changed, HTTP 409)" in other.stderr
    assert admin.get(f"/v1/promotions/{promotion_id}").json()["state"] == "awaiting_approval"
    approved = approve("--digest", version["digest"])
    assert approved.returncode == 0, approved.stderr
    assert admin.get(f"/v1/promotions/{promotion_id}").json()["state"] == "active"

    acme = cli("promotion", "list", "--pool", pool, "--tenant", "acme", token=tokens["global_admin"],
               url=registry.url)
    globex = cli("promotion", "list", "--pool", pool, "--tenant", "globex", token=tokens["global_admin"],
                 url=registry.url)
    assert acme.returncode == 0 and globex.returncode == 0, acme.stderr + globex.stderr
    assert int(promotion_id) in {p["id"] for p in json.loads(acme.stdout)}
    assert {p["tenant"] for p in json.loads(acme.stdout)} == {"acme"} and json.loads(globex.stdout) == []


def test_suite_create_ignore_eos_and_eval_show_examples_cursor(registry, tokens, admin, make_ready, tmp_path):
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text(json.dumps({"prompt": "1 2 =>", "reference": "one two"}) + "\n")
    name = f"cli-eos-{secrets.token_hex(3)}"

    created = cli("suite", "create", name, "--base-model", "promo-base", "--dataset", str(dataset),
                  "--max-tokens", "8", "--ignore-eos", token=tokens["global_admin"], url=registry.url)
    assert created.returncode == 0, created.stderr
    assert admin.get(f"/v1/eval-suites/{name}").json()["generation"]["ignore_eos"] is True

    evaluation = evaluations_of(admin, make_ready("cli-cursor-bot"))[0]
    shown = cli("eval", "show", str(evaluation["id"]), "--examples", "1", "--examples-cursor", "not-a-cursor",
                token=tokens["global_admin"], url=registry.url)
    assert shown.returncode == 1 and "cursor" in shown.stderr and "HTTP 4" in shown.stderr
