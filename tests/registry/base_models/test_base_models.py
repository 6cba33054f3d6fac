"""Base models are registered from config.json, with every module a LoRA can target derived from
the architecture itself: each family's real shapes, fused projections and experts included."""

from __future__ import annotations

import json

import pytest
import transformers
from sqlalchemy.orm import Session

from devkit.family_models import FAMILIES, config_of
from registry.base_models import repository
from registry.base_models.derivation import derive
from registry.base_models.module_table import ModuleTable
from registry.base_models.stored_tables import config_digest, table_for_config
from tests.registry.base_models.families import LAYER_MODULES
from tests.support.asserts import assert_refused
from devkit.units_of_work import unit_of_work

LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 128256,
}


def modules_of(base: dict) -> dict[str, tuple]:
    return {m["name"]: (m["kind"], m["in_features"], m["out_features"], m["experts"], m["layers"])
            for m in base["modules"]}


def test_register_derives_every_module_with_its_shape(admin, stored_state):
    response = admin.post("/v1/base-models", json={"name": "meta-llama/Llama-3.1-8B", "config": LLAMA_8B,
                                                   "aliases": ["/models/llama-3.1-8b"]})
    assert response.status_code == 201, response.text
    base = response.json()
    assert (base["architecture"], base["num_layers"], base["hidden_size"]) == ("LlamaForCausalLM", 32, 4096)
    assert base["transformers"] == transformers.__version__ and base["tied_embeddings"] is False
    assert modules_of(base) == {
        "model.embed_tokens": ("embedding", 128256, 4096, None, 0),
        **{f"model.layers.*.self_attn.{name}": ("linear", n_in, n_out, None, 32) for name, n_in, n_out in (
            ("q_proj", 4096, 4096), ("k_proj", 4096, 1024), ("v_proj", 4096, 1024), ("o_proj", 4096, 4096))},
        **{f"model.layers.*.mlp.{name}": ("linear", n_in, n_out, None, 32) for name, n_in, n_out in (
            ("gate_proj", 4096, 14336), ("up_proj", 4096, 14336), ("down_proj", 14336, 4096))},
        "lm_head": ("linear", 4096, 128256, None, 0),
    }
    assert admin.get("/v1/base-models/meta-llama/Llama-3.1-8B").json() == base
    assert admin.get("/v1/base-models/meta-llama/Llama-3.1-8B").json()["aliases"] == ["/models/llama-3.1-8b"]
    events = admin.get("/v1/audit", params={"action": "base_model.register"}).json()["items"]
    assert any(e["subject"] == "base-model/meta-llama/Llama-3.1-8B" for e in events)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_registers_with_the_modules_its_layers_hold(admin, family):
    _, architecture, _ = FAMILIES[family]
    response = admin.post("/v1/base-models", json={"name": f"family-{family}", "config": config_of(family)})

    assert response.status_code == 201, response.text
    base = response.json()
    assert base["architecture"] == architecture
    in_layers = {name: shape for name, shape in modules_of(base).items() if shape[4]}
    assert in_layers == {entry.name: (entry.kind, entry.in_features, entry.out_features, entry.experts, 2)
                         for entry in LAYER_MODULES[family]}
    assert modules_of(base)["model.embed_tokens"] == ("embedding", 256, 128, None, 0)


def test_a_second_base_from_the_same_config_shares_its_table(admin, base_model, tiny_base):
    config = json.loads((tiny_base / "config.json").read_text())
    response = admin.post("/v1/base-models", json={"name": "tiny-llama-again", "config": config})

    assert response.status_code == 201, response.text
    first = admin.get(f"/v1/base-models/{base_model}").json()
    assert response.json()["modules"] == first["modules"]
    assert modules_of(first)["model.layers.*.self_attn.v_proj"][1:3] == (128, 64)


@pytest.mark.parametrize(("body", "status", "code", "message"), [
    ({"name": "x1", "config": {**LLAMA_8B, "architectures": ["GPT2LMHeadModel"]}}, 422,
     "unsupported_architecture", "'GPT2LMHeadModel' is served by vLLM 0.32.0 without LoRA support"),
    ({"name": "x2", "config": {**LLAMA_8B, "hidden_size": "4096"}}, 422, "invalid_base_config",
     "'hidden_size' must be a positive integer"),
    ({"name": "x3", "config": {**LLAMA_8B, "num_key_value_heads": 5}}, 422, "invalid_base_config",
     "not a multiple"),
    ({"name": "x4", "config": {}}, 422, "invalid_base_config", "no 'architectures'"),
    ({"name": "x6", "config": {**LLAMA_8B, "num_hidden_layers": 100_000}}, 422, "invalid_base_config",
     "'num_hidden_layers' must be a positive integer of at most 1024"),
    ({"name": "x7", "config": {**LLAMA_8B, "model_type": "no-such-family"}}, 422,
     "unsupported_architecture",
     f"transformers {transformers.__version__} cannot build this base: Unrecognized model identifier"),
    ({"name": "tiny-llama", "config": LLAMA_8B}, 409, "already_exists", "'tiny-llama'"),
    ({"name": "x5", "config": LLAMA_8B, "aliases": ["tiny-llama"]}, 409, "already_exists", "'tiny-llama'"),
    ({"name": "../x", "config": LLAMA_8B}, 422, "invalid_request", "name"),
    ({"name": "x8", "config": {**LLAMA_8B, "attn_implementation": "kernels-community/flash-attn"}}, 422,
     "invalid_base_config", "'attn_implementation' names 'kernels-community/flash-attn', not one of"),
    ({"name": "x9", "config": {**LLAMA_8B, "text_config": {"_attn_implementation": "evil/kernel:fn"}}}, 422,
     "invalid_base_config", "'text_config._attn_implementation' names 'evil/kernel:fn'"),
    ({"name": "x10", "config": {**LLAMA_8B, "auto_map": {"AutoModelForCausalLM": "modeling.Evil"}}}, 422,
     "invalid_base_config", "'auto_map' would load code that is not part of transformers"),
    ({"name": "x11", "config": {**LLAMA_8B, "trust_remote_code": True}}, 422, "invalid_base_config",
     "'trust_remote_code' would load code"),
    ({"name": "x12", "config": {**LLAMA_8B, "layer_configs": [{"ok": 1}, {"auto_map": {"AutoModel": "m.Evil"}}]}},
     422, "invalid_base_config", "'layer_configs[1].auto_map' would load code"),
    ({"name": "x13", "config": {**LLAMA_8B, "blocks": [[{"attn_implementation": "evil/kernel"}]]}}, 422,
     "invalid_base_config", "'blocks[0][0].attn_implementation' names 'evil/kernel'"),
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


def test_a_table_an_older_registry_stored_is_derived_again_when_read(engine):
    """A registry that learned more of architectures (here: checkpoint renames, and the name
    config.json gives the class) does not keep serving what an older one stored."""
    config = {**config_of("mixtral"), "vocab_size": 257}  # a config, and a stored table, of its own
    older = derive(config).to_json()
    del older["format"]
    older.update(architecture="MixtralStale", renamed=[])
    with unit_of_work(engine) as session:
        repository.store_table(session, config_digest(config), older)

    with unit_of_work(engine) as session:
        table = table_for_config(session, config)

    assert table.architecture == "MixtralForCausalLM" and table.renamed == ((".block_sparse_moe.", ".mlp."),)
    with Session(engine) as session:
        stored = repository.stored_table(session, config_digest(config))
    assert ModuleTable.is_current(stored) and stored["architecture"] == "MixtralForCausalLM"


def test_an_older_table_still_serves_when_this_registry_cannot_derive_it_again(engine):
    """A family this transformers no longer builds keeps the table an older registry stored,
    and a table from a newer registry, with fields this one does not know, still reads."""
    config = {**config_of("llama"), "model_type": "retired-family"}
    older = derive(config_of("llama")).to_json()
    del older["format"]
    with unit_of_work(engine) as session:
        repository.store_table(session, config_digest(config), {**older, "a_newer_field": [1]})

    with unit_of_work(engine) as session:
        table = table_for_config(session, config)

    assert table == ModuleTable.from_json(older)
