"""Pools carry vLLM's LoRA limits for one base model."""

from __future__ import annotations

import pytest

from tests.support.asserts import assert_refused


def pool(**changes):
    return {"name": "chat", "base_model": "tiny-llama", "max_loras": 2, "max_cpu_loras": 4,
            "max_lora_rank": 16, "dtype": "float32", **changes}


def test_create_get_and_list(admin, base_model):
    created = admin.post("/v1/pools", json=pool(name="pool-a"))
    assert created.status_code == 201, created.text
    assert created.json()["max_lora_rank"] == 16 and created.json()["required_suites"] == []
    assert admin.get("/v1/pools/pool-a").json()["base_model"] == "tiny-llama"
    assert "pool-a" in {p["name"] for p in admin.get("/v1/pools").json()["items"]}


@pytest.mark.parametrize(("body", "status", "code", "message"), [
    (pool(name="p1", max_lora_rank=24), 422, "invalid_request", "max_lora_rank must be one of"),
    (pool(name="p2", max_cpu_loras=1), 422, "invalid_request", "max_cpu_loras must be at least max_loras"),
    (pool(name="p3", base_model="missing"), 404, "base_model_not_found", "'missing'"),
    (pool(name="p4", required_suites=["qa"]), 422, "unknown_suite", "'qa'"),
    (pool(name="Bad Name"), 422, "invalid_name", "invalid pool name"),
    (pool(name="p5", dtype="int8"), 422, "invalid_request", "dtype"),
    (pool(name="pool-dup"), 409, "already_exists", "'pool-dup'"),
])
def test_bad_pool_is_refused_and_nothing_is_stored(admin, base_model, body, status, code, message):
    if body["name"] == "pool-dup":
        assert admin.post("/v1/pools", json=pool(name="pool-dup")).status_code == 201
    before = admin.get("/v1/pools", params={"limit": 200}).json()["items"]
    assert_refused(admin.post("/v1/pools", json=body), status, code, message)
    assert admin.get("/v1/pools", params={"limit": 200}).json()["items"] == before
