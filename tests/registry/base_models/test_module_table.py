"""The module table comes from the real architecture: transformers builds each family's skeleton
from its config.json, in a process of its own, and every module a LoRA can target is listed."""

from __future__ import annotations

import pytest

from registry.base_models.module_table import MAX_CONFIG_BYTES, ModuleEntry, ModuleTable, derive
from registry.errors import Unprocessable

SIZES = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
         "num_hidden_layers": 2, "vocab_size": 256, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
LAYERS = (0, 1)


def linear(name: str, in_features: int, out_features: int) -> ModuleEntry:
    return ModuleEntry(f"model.layers.*.{name}", "linear", in_features, out_features, None, LAYERS)


LLAMA_SHAPED = {linear("self_attn.q_proj", 64, 64), linear("self_attn.k_proj", 64, 32),
                linear("self_attn.v_proj", 64, 32), linear("self_attn.o_proj", 64, 64),
                linear("mlp.gate_proj", 64, 128), linear("mlp.up_proj", 64, 128),
                linear("mlp.down_proj", 128, 64)}
# family -> (its config beyond SIZES, its class, what its layers hold)
FAMILIES = {
    "llama": ({"architectures": ["LlamaForCausalLM"], "tie_word_embeddings": True}, "LlamaForCausalLM",
              LLAMA_SHAPED),
    "mistral": ({"model_type": "mistral"}, "MistralForCausalLM", LLAMA_SHAPED),
    "qwen2": ({"model_type": "qwen2"}, "Qwen2ForCausalLM", LLAMA_SHAPED),
    # An explicit head_dim wider than hidden_size / heads: q is 4 x 32 wide, not 64.
    "qwen3": ({"model_type": "qwen3", "head_dim": 32}, "Qwen3ForCausalLM",
              {linear("self_attn.q_proj", 64, 128), linear("self_attn.k_proj", 64, 64),
               linear("self_attn.v_proj", 64, 64), linear("self_attn.o_proj", 128, 64),
               linear("mlp.gate_proj", 64, 128), linear("mlp.up_proj", 64, 128), linear("mlp.down_proj", 128, 64)}),
    "gemma2": ({"model_type": "gemma2", "head_dim": 16}, "Gemma2ForCausalLM", LLAMA_SHAPED),
    # Fused projections: q, k and v in one module, gate and up in another.
    "phi3": ({"model_type": "phi3"}, "Phi3ForCausalLM",
             {linear("self_attn.qkv_proj", 64, 128), linear("self_attn.o_proj", 64, 64),
              linear("mlp.gate_up_proj", 64, 256), linear("mlp.down_proj", 128, 64)}),
    # Experts as 3-D parameters (experts, out, in) beside plain attention.
    "mixtral": ({"model_type": "mixtral", "num_local_experts": 4}, "MixtralForCausalLM",
                {linear("self_attn.q_proj", 64, 64), linear("self_attn.k_proj", 64, 32),
                 linear("self_attn.v_proj", 64, 32), linear("self_attn.o_proj", 64, 64),
                 ModuleEntry("model.layers.*.mlp.experts.gate_up_proj", "expert_parameter", 64, 256, 4, LAYERS),
                 ModuleEntry("model.layers.*.mlp.experts.down_proj", "expert_parameter", 128, 64, 4, LAYERS)}),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_each_familys_table_lists_what_its_layers_hold_with_their_shapes(family):
    extra, architecture, layer_modules = FAMILIES[family]
    table = derive({**SIZES, **extra})

    assert table.architecture == architecture
    assert {entry for entry in table.modules if entry.layers} == layer_modules
    assert ModuleEntry("model.embed_tokens", "embedding", 256, 64, None, ()) in table.modules
    assert ModuleTable.from_json(table.to_json()) == table


def test_a_config_transformers_cannot_build_is_refused_naming_its_version():
    import transformers

    with pytest.raises(Unprocessable) as refused:
        derive({**SIZES, "model_type": "no-such-family"})
    assert refused.value.code == "unsupported_architecture"
    assert str(refused.value) == (f"transformers {transformers.__version__} cannot build this base: "
                                  "Unrecognized model identifier: no-such-family")


def test_an_architecture_nobody_knows_without_a_model_type_is_refused():
    with pytest.raises(Unprocessable) as refused:
        derive({**SIZES, "architectures": ["NoSuchForCausalLM"]})
    assert "no causal language model transformers knows" in str(refused.value)


def test_an_oversized_config_is_refused_before_any_process_starts():
    config = {**SIZES, "model_type": "llama", "padding": "x" * MAX_CONFIG_BYTES}
    with pytest.raises(Unprocessable) as refused:
        derive(config, python="/nonexistent/python")  # never started: it would raise otherwise
    assert refused.value.code == "invalid_base_config"
    assert f"at most {MAX_CONFIG_BYTES} are accepted" in str(refused.value)
