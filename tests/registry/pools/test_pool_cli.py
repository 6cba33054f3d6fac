"""`loraplane pool create` and `pool update` take every option the API does, and the README's
first steps, run as written, make a pool whose promotions pass the gates once evaluated. Each
case checks what the registry stored; each refusal, that nothing was."""

from __future__ import annotations

import json
import secrets
import shutil
from pathlib import Path
from typing import get_args

import pytest

from devkit.pipeline_steps import create_suite, evaluations_of, finish_evaluation
from loraplane.cli import RequalifyChoice
from registry.pools.schemas import RequalifyPolicy
from tests.support.cli import cli

PARITY_ROWS = [{"prompt": "1 2 =>", "reference": "one two"}]


@pytest.fixture(scope="module")
def own_base(admin, tiny_base) -> str:
    """A base of this module's own with a global suite that measures parity."""
    name = f"pool-cli-{secrets.token_hex(3)}"
    config = json.loads((tiny_base / "config.json").read_text())
    assert admin.post("/v1/base-models", json={"name": name, "config": config}).status_code == 201
    create_suite(admin, f"{name}-parity", name, PARITY_ROWS, {"exact_match": {"min": 0.5}, "parity": {}})
    create_suite(admin, f"{name}-regression", name, PARITY_ROWS, {"exact_match": {"min": 0.5}})
    return name


def pools(admin) -> list[str]:
    return [p["name"] for p in admin.get("/v1/pools", params={"limit": 200}).json()["items"]]


def test_the_clis_requalify_policies_are_the_apis():
    assert {choice.value for choice in RequalifyChoice} == set(get_args(RequalifyPolicy))


def test_pool_create_and_update_store_required_suites_and_the_requalify_policy(registry, tokens, admin, own_base):
    name = f"cli-pool-{secrets.token_hex(3)}"

    def run(*args: str):
        return cli("pool", *args, token=tokens["global_admin"], url=registry.url)

    created = run("create", name, "--base-model", own_base, "--max-lora-rank", "8",
                  "--required-suites", f"{own_base}-parity", "--required-suites", f"{own_base}-regression",
                  "--requalify-policy", "suspend", "--canary-min-routers", "1")
    assert created.returncode == 0, created.stderr
    stored = admin.get(f"/v1/pools/{name}").json()
    assert stored["required_suites"] == [f"{own_base}-parity", f"{own_base}-regression"]
    assert (stored["requalify_policy"], stored["canary_min_routers"], stored["max_lora_rank"]) == ("suspend", 1, 8)
    assert "requires no suite" not in created.stderr

    updated = run("update", name, "--required-suites", f"{own_base}-parity", "--requalify-policy", "keep_serving")
    assert updated.returncode == 0, updated.stderr
    stored = admin.get(f"/v1/pools/{name}").json()
    assert (stored["required_suites"], stored["requalify_policy"]) == ([f"{own_base}-parity"], "keep_serving")
    cleared = run("update", name, "--required-suites", "none", "--canary-min-routers", "3")
    assert cleared.returncode == 0, cleared.stderr
    stored = admin.get(f"/v1/pools/{name}").json()
    assert (stored["required_suites"], stored["canary_min_routers"]) == ([], 3)
    nothing = run("update", name)
    assert nothing.returncode == 1
    assert "give --required-suites, --requalify-policy, --canary-min-routers, --overflow or --cold-tier-bytes" in nothing.stderr
    assert admin.get(f"/v1/pools/{name}").json() == stored


def test_pool_create_and_update_take_the_overflow_and_a_cold_tier_with_units(registry, tokens, admin, own_base):
    name = f"cli-tail-{secrets.token_hex(3)}"

    def run(*args: str):
        return cli("pool", *args, token=tokens["global_admin"], url=registry.url)

    created = run("create", name, "--base-model", own_base, "--overflow", "on_demand", "--cold-tier-bytes", "200GiB")
    assert created.returncode == 0, created.stderr
    stored = admin.get(f"/v1/pools/{name}").json()
    assert (stored["overflow"], stored["cold_tier_bytes"]) == ("on_demand", 200 * 2**30)
    grown = run("update", name, "--cold-tier-bytes", "1TB")
    assert grown.returncode == 0, grown.stderr
    assert admin.get(f"/v1/pools/{name}").json()["cold_tier_bytes"] == 10**12
    refused = run("update", name, "--overflow", "refuse")  # nothing served: the set fits
    assert refused.returncode == 0, refused.stderr
    stored = admin.get(f"/v1/pools/{name}").json()
    assert (stored["overflow"], stored["cold_tier_bytes"]) == ("refuse", None)

    for args, status, message in (
            (("--cold-tier-bytes", "lots"), 1, "--cold-tier-bytes 'lots' is not a size"),
            (("--overflow", "sometimes"), 2, "Invalid value for '--overflow'"),
            (("--overflow", "on_demand"), 1, "overflow on_demand needs cold_tier_bytes")):
        bad = run("update", name, *args)
        assert bad.returncode == status, bad.stderr
        assert message in " ".join(bad.stderr.replace("│", " ").split())
        assert admin.get(f"/v1/pools/{name}").json() == stored
    before = pools(admin)
    no_tier = run("create", f"{name}-2", "--base-model", own_base, "--overflow", "on_demand")
    assert no_tier.returncode == 1 and "overflow on_demand needs cold_tier_bytes" in no_tier.stderr
    assert pools(admin) == before


@pytest.mark.parametrize(("suites", "policy", "status", "message"), [
    ("SUITE,SUITE", "keep_serving", 1, "--required-suites names 'SUITE' more than once"),
    ("SUITE,", "keep_serving", 1, "holds an empty or over-long name"),
    ("no-such-suite", "keep_serving", 1, "(unknown_suite, HTTP 422)"),
    ("SUITE", "sometimes", 2, "Invalid value for '--requalify-policy'"),
])
def test_a_bad_suite_list_or_policy_is_refused_and_no_pool_is_made(
        registry, tokens, admin, own_base, suites, policy, status, message):
    name = f"cli-pool-{secrets.token_hex(3)}"
    suites = suites.replace("SUITE", f"{own_base}-parity")
    before = pools(admin)

    refused = cli("pool", "create", name, "--base-model", own_base, "--required-suites", suites,
                  "--requalify-policy", policy, token=tokens["global_admin"], url=registry.url)

    assert refused.returncode == status, refused.stderr
    assert message.replace("SUITE", f"{own_base}-parity") in " ".join(refused.stderr.replace("│", " ").split())
    assert pools(admin) == before


def adapter_for(make_adapter, folder: Path, base_name_or_path: str) -> Path:
    shutil.copytree(make_adapter(seed=81), folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": base_name_or_path}))
    return folder


def test_the_readmes_first_steps_make_a_pool_whose_promotions_pass_once_evaluated(
        registry, tokens, admin, engine, tiny_base, make_adapter, tmp_path):
    """README.md, "First steps": register the base with an alias, create a suite that measures
    parity, the pool requiring it, push, and request the promotion."""
    base = f"readme-llama-{secrets.token_hex(3)}"
    alias, pool, suite = f"/models/{base}", f"chat-{secrets.token_hex(3)}", f"parity-smoke-{secrets.token_hex(3)}"
    dataset = tmp_path / "smoke.jsonl"
    dataset.write_text("".join(json.dumps(row) + "\n" for row in PARITY_ROWS))
    steps = [
        ("base-model", "register", base, "--config", str(tiny_base / "config.json"), "--alias", alias),
        ("suite", "create", suite, "--base-model", base, "--dataset", str(dataset),
         "--metrics", '{"exact_match": {"min": 0.5}, "parity": {}}'),
        ("pool", "create", pool, "--base-model", base, "--max-loras", "2", "--max-cpu-loras", "4",
         "--max-lora-rank", "16", "--required-suites", suite),
    ]
    for step in steps:
        done = cli(*step, token=tokens["global_admin"], url=registry.url)
        assert done.returncode == 0, (step, done.stderr)

    adapter = f"readme-bot-{secrets.token_hex(3)}"
    pushed = cli("push", str(adapter_for(make_adapter, tmp_path / "adapter", alias)), "--adapter", f"acme/{adapter}",
                 "--quiet", token=tokens["acme_uploader"], url=registry.url)
    assert pushed.returncode == 0, pushed.stderr
    version = json.loads(pushed.stdout[pushed.stdout.index("{"):])
    (evaluation,) = evaluations_of(admin, version)  # the pool's suite, queued at upload
    assert evaluation["suite"] == suite
    finish_evaluation(engine, evaluation["id"])  # as a worker records it

    requested = cli("promotion", "request", pool, f"acme/{adapter}@1", token=tokens["acme_uploader"],
                    url=registry.url)
    assert requested.returncode == 0, requested.stderr
    promotion = json.loads(requested.stdout)
    assert promotion["state"] == "awaiting_approval"
    assert {g["name"]: g["passed"] for g in promotion["gates"]}["parity"] is True


def test_a_pool_without_suites_says_its_promotions_need_a_parity_evaluation(registry, tokens, own_base):
    pool = f"bare-{secrets.token_hex(3)}"
    created = cli("pool", "create", pool, "--base-model", own_base, token=tokens["global_admin"], url=registry.url)
    assert created.returncode == 0, created.stderr
    assert f"pool {pool} requires no suite" in created.stderr
    assert f"loraplane pool update {pool} --required-suites SUITE" in " ".join(created.stderr.split())
