"""GET /v1/pools/{pool}/sizing on the real registry, with figures worked out by hand for the
tiny base: hidden 128, intermediate 256, 4 heads, 2 kv heads, head_dim 32, 2 layers, vocab 1000.
The pools here are this module's own: other tests promote into promo-open as well."""

from __future__ import annotations

import pytest
from rich.console import Console
from safetensors import safe_open

from devkit.pipeline_steps import request_promotion
from loraplane import plan
from tests.registry.conftest import PROMO_BASE
from tests.support.asserts import assert_refused

# Sum over the 7 projections of (in + out): q 128+128, k 128+64, v 128+64, o 128+128,
# gate 128+256, up 128+256, down 256+128.
IN_PLUS_OUT = 2048
# Parameters: embeddings and lm_head 2 x 1000 x 128; per layer q 128x128, k 128x64, v 128x64,
# o 128x128, gate, up, down 3 x 128x256, 2 norms of 128; 2 layers; final norm 128.
BASE_PARAMS = 2 * 1000 * 128 + 2 * (16384 + 8192 + 8192 + 16384 + 3 * 32768 + 256) + 128
LIMITS = {"max_loras": 2, "max_cpu_loras": 64, "max_lora_rank": 16, "dtype": "float32"}


@pytest.fixture(scope="module")
def sizing_pools(admin, promo_pools) -> dict[str, str]:
    names = {"empty": "sizing-empty", "served": "sizing-served"}
    for name in names.values():
        response = admin.post("/v1/pools", json={"name": name, "base_model": PROMO_BASE, **LIMITS})
        assert response.status_code == 201, response.text
    return names


@pytest.fixture(scope="module")
def served_version(sizing_pools, make_ready, uploader, second_reviewer) -> dict:
    version = make_ready("sizing-bot", r=8)
    created = request_promotion(uploader, sizing_pools["served"], version)
    assert created.status_code == 201, created.text
    approved = second_reviewer.post(f"/v1/promotions/{created.json()['id']}/approve",
                                    json={"comment": "ok"})
    assert approved.status_code == 200, approved.text
    return version


def sizing_of(client, pool: str, **params) -> dict:
    response = client.get(f"/v1/pools/{pool}/sizing", params=params)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_pool_with_one_rank_8_adapter_under_max_lora_rank_16(sizing_pools, served_version, admin):
    sizing = sizing_of(admin, sizing_pools["served"])

    active, slots, waste = sizing["active_set"], sizing["lora_slots"], sizing["rank_waste"]
    assert (active["versions"]["value"], active["largest_rank"]["value"]) == (1, 8)
    assert active["artifact_bytes"]["value"] == served_version["size_bytes"]
    assert slots["total"] == {"value": 2 * IN_PLUS_OUT * 16 * 4 * 2, "unit": "bytes",
                              "source": "measured", "note": slots["total"]["note"]}
    assert slots["total"]["value"] == 524_288
    assert waste["wasted"]["value"] == 2 * IN_PLUS_OUT * (16 - 8) * 4 * 2 == 262_144
    assert waste["wasted"]["source"] == "measured"
    assert waste["recommended_max_lora_rank"]["value"] == 8
    adapters = sizing["comparison"]["assumptions"]["adapters"]
    assert (adapters["value"], adapters["source"]) == (1, "measured")


def test_base_weights_match_the_real_checkpoint(sizing_pools, served_version, admin, tiny_base):
    with safe_open(str(tiny_base / "model.safetensors"), framework="numpy") as checkpoint:
        stored = sum(checkpoint.get_tensor(name).nbytes for name in checkpoint.keys())

    base = sizing_of(admin, sizing_pools["served"])["comparison"]["base_weights"]

    assert base["value"] == BASE_PARAMS * 4 == stored == 2_206_208
    assert base["source"] == "measured"


def test_assumptions_from_the_query_are_labelled_and_used(sizing_pools, served_version, uploader):
    sizing = sizing_of(uploader, sizing_pools["served"], adapters=50, gpu_hour_usd=3)
    comparison = sizing["comparison"]

    assert comparison["assumptions"]["adapters"] == {
        "value": 50, "unit": "adapters", "source": "assumed", "note": "adapters to serve (given)"}
    assert comparison["assumptions"]["tokens_per_s"]["note"].endswith("(default)")
    full, multi = comparison["full_replicas"], comparison["multi_lora"]
    assert (full["gpus"]["value"], multi["gpus"]["value"]) == (50, 2)
    assert full["gpus"]["source"] == multi["gpus"]["source"] == "assumed"
    # 50 GPUs x $3 / (2500 tokens/s x 3600 s) x 1e6 tokens
    assert full["cost_per_1m_tokens"]["value"] == pytest.approx(50 * 3 / (2500 * 3600) * 1e6)
    assert comparison["gpu_ratio"]["value"] == 25


def test_an_empty_pool_reports_no_waste_and_says_why(sizing_pools, admin):
    sizing = sizing_of(admin, sizing_pools["empty"])

    assert sizing["rank_waste"]["wasted"]["value"] is None
    assert "no active adapters" in sizing["rank_waste"]["wasted"]["note"]
    assert sizing["lora_slots"]["total"]["value"] == 524_288
    assert sizing["comparison"]["assumptions"]["adapters"]["source"] == "assumed"


@pytest.mark.parametrize(("params", "name"), [
    ({"gpu_hour_usd": 0}, "gpu_hour_usd"),
    ({"gpu_memory_gib": 5000}, "gpu_memory_gib"),
    ({"tokens_per_s": "fast"}, "tokens_per_s"),
    ({"lora_throughput_penalty": 1}, "lora_throughput_penalty"),
    ({"demand_tokens_per_s": "nan"}, "demand_tokens_per_s"),
    ({"weights_fraction": 2}, "weights_fraction"),
    ({"adapters": 0}, "adapters"),
])
def test_a_bad_assumption_is_refused_by_name(sizing_pools, admin, params, name):
    response = admin.get(f"/v1/pools/{sizing_pools['empty']}/sizing", params=params)
    assert_refused(response, 422, "invalid_request", name)


def test_sizing_needs_a_token_and_a_known_pool(sizing_pools, client_for, admin):
    assert_refused(client_for("none").get(f"/v1/pools/{sizing_pools['empty']}/sizing"),
                   401, "unauthorized", "")
    assert_refused(admin.get("/v1/pools/no-such-pool/sizing"), 404, "pool_not_found",
                   "'no-such-pool'")


def test_the_cli_renders_the_real_answer(sizing_pools, served_version, admin):
    console = Console(record=True, width=200)

    plan.render(sizing_of(admin, sizing_pools["served"]), console)

    text = console.export_text()
    assert "LoRA slot memory" in text and "multi-LoRA" in text
    assert "512.00 KiB" in text and "256.00 KiB" in text  # slots, and the waste
    assert "measured" in text and "assumed" in text


def test_a_tenant_counts_only_its_own_versions_in_a_shared_pool(sizing_pools, served_version, admin, client_for):
    """A pool serves every tenant: another tenant learns nothing of acme's count, rank or bytes."""
    pool = sizing_pools["served"]
    everyone, acme = sizing_of(admin, pool), sizing_of(client_for("acme_reviewer"), pool)
    globex = sizing_of(client_for("globex_uploader"), pool)

    assert everyone["scope"] == "pool" and acme["scope"] == "tenant acme" and globex["scope"] == "tenant globex"
    assert acme["active_set"]["versions"]["value"] == everyone["active_set"]["versions"]["value"] == 1
    assert globex["active_set"]["versions"]["value"] == 0
    assert globex["active_set"]["artifact_bytes"]["value"] == 0
    assert globex["active_set"]["largest_rank"]["value"] in (None, 0)
