"""Base models are registered from config.json, and their projection shapes derived from it."""

from __future__ import annotations

import json

import pytest

from tests.support.asserts import assert_refused

LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 128256,
}


def test_register_derives_every_projection_shape(admin, stored_state):
    response = admin.post("/v1/base-models", json={"name": "meta-llama/Llama-3.1-8B", "config": LLAMA_8B,
                                                   "aliases": ["/models/llama-3.1-8b"]})
    assert response.status_code == 201, response.text
    base = response.json()
    assert base["head_dim"] == 128 and base["num_key_value_heads"] == 8 and base["num_layers"] == 32
    assert base["projections"] == {
        "q_proj": [4096, 4096], "k_proj": [4096, 1024], "v_proj": [4096, 1024], "o_proj": [4096, 4096],
        "gate_proj": [4096, 14336], "up_proj": [4096, 14336], "down_proj": [14336, 4096],
    }
    assert admin.get("/v1/base-models/meta-llama/Llama-3.1-8B").json()["aliases"] == ["/models/llama-3.1-8b"]
    events = admin.get("/v1/audit", params={"action": "base_model.register"}).json()["items"]
    assert any(e["subject"] == "base-model/meta-llama/Llama-3.1-8B" for e in events)


def test_tiny_base_shapes_match_its_real_config(admin, base_model, tiny_base):
    config = json.loads((tiny_base / "config.json").read_text())
    base = admin.get(f"/v1/base-models/{base_model}").json()
    assert base["head_dim"] == config["head_dim"] == 32
    assert base["projections"]["v_proj"] == [128, 64]


@pytest.mark.parametrize(("body", "status", "code", "message"), [
    ({"name": "x1", "config": {**LLAMA_8B, "architectures": ["GPT2LMHeadModel"]}}, 422,
     "unsupported_architecture", "'GPT2LMHeadModel'"),
    ({"name": "x2", "config": {**LLAMA_8B, "hidden_size": "4096"}}, 422, "invalid_base_config",
     "'hidden_size' must be a positive integer"),
    ({"name": "x3", "config": {**LLAMA_8B, "num_key_value_heads": 5}}, 422, "invalid_base_config",
     "not a multiple"),
    ({"name": "x4", "config": {}}, 422, "invalid_base_config", "no 'architectures'"),
    ({"name": "tiny-llama", "config": LLAMA_8B}, 409, "already_exists", "'tiny-llama'"),
    ({"name": "x5", "config": LLAMA_8B, "aliases": ["tiny-llama"]}, 409, "already_exists", "'tiny-llama'"),
    ({"name": "../x", "config": LLAMA_8B}, 422, "invalid_request", "name"),
])
def test_bad_base_model_is_refused_and_nothing_is_stored(admin, base_model, body, status, code, message):
    before = admin.get("/v1/base-models", params={"limit": 200}).json()["items"]
    assert_refused(admin.post("/v1/base-models", json=body), status, code, message)
    assert admin.get("/v1/base-models", params={"limit": 200}).json()["items"] == before


def test_an_oversized_chunked_body_is_refused_with_413(admin, base_model):
    before = admin.get("/v1/base-models", params={"limit": 200}).json()["items"]

    def body():
        yield b'{"name": "huge", "config": {"padding": "'
        for _ in range(3):
            yield b"x" * (1024 * 1024)
        yield b'"}}'

    response = admin.post("/v1/base-models", content=body(), headers={"Content-Type": "application/json"})

    assert response.status_code == 413
    assert response.json()["error"]["code"] == "body_too_large"
    assert admin.get("/v1/base-models", params={"limit": 200}).json()["items"] == before
