"""The module table comes from the real architecture: transformers builds each family's skeleton
from its config.json, in a process of its own, and every module a LoRA can target is listed."""

from __future__ import annotations

import pytest

from registry.base_models.module_table import MAX_CONFIG_BYTES, ModuleTable, derive
from registry.errors import Unprocessable
from devkit.family_models import SIZES, config_of


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


def test_a_table_survives_its_json_round_trip():
    table = derive(config_of("mixtral"))
    assert ModuleTable.from_json(table.to_json()) == table
    assert table.lora_tensor_bound() == 2 * (1 + 2 * 5 + 1 + 2 * 2 * 3 * 4)  # experts one by one


def test_a_module_with_two_shapes_is_checked_against_the_one_in_its_layer():
    """Gemma 4's global-attention layers are wider than its local ones: one name, two rows."""
    from registry.adapters.lora_layout import check_layout
    from registry.adapters.peft_config import parse_config
    from registry.adapters.safetensors_check import TensorInfo
    from registry.base_models.module_table import ModuleEntry

    table = ModuleTable("LocalGlobalForCausalLM", "5.25.0", 64, 2, 256, False, (
        ModuleEntry("model.layers.*.self_attn.q_proj", "linear", 64, 128, None, (0,)),
        ModuleEntry("model.layers.*.self_attn.q_proj", "linear", 64, 256, None, (1,))))
    spec = parse_config(b'{"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"], '
                        b'"base_model_name_or_path": "local-global"}')
    tensors = [TensorInfo(f"base_model.model.model.layers.{layer}.self_attn.q_proj.lora_{side}.weight", "F32",
                          shape, 0, 0)
               for layer, out in ((0, 128), (1, 256)) for side, shape in (("A", (4, 64)), ("B", (out, 4)))]

    assert check_layout(tensors, spec, table).modules == ("q_proj",)


def test_experts_stored_in_first_are_read_so_whatever_the_module_says():
    """Llama 4 stores its experts (experts, in, out) without saying so, Mixtral (experts, out, in):
    the residual stream's width tells which side is which."""
    llama4 = derive({**SIZES, "model_type": "llama4_text", "architectures": ["Llama4ForCausalLM"],
                     "head_dim": 32, "intermediate_size": 32, "intermediate_size_mlp": 256,
                     "num_local_experts": 4, "interleave_moe_layer_step": 1})
    mixtral = derive(config_of("mixtral"))

    def experts(table: ModuleTable) -> dict[str, tuple[int, int]]:
        return {e.short_name: (e.in_features, e.out_features) for e in table.modules if e.kind == "expert_parameter"}

    assert experts(llama4) == {"gate_up_proj": (128, 64), "down_proj": (32, 128)}
    assert experts(mixtral) == {"gate_up_proj": (128, 512), "down_proj": (256, 128)}


def test_the_architecture_is_the_one_config_json_names_as_vllm_reads_it():
    """transformers spells PhiMoE's class PhimoeForCausalLM; vLLM, and config.json, PhiMoEForCausalLM.
    The table keeps config.json's, so that vLLM's facts for it apply."""
    table = derive({**SIZES, "model_type": "phimoe", "architectures": ["PhiMoEForCausalLM"],
                    "num_local_experts": 4, "num_experts_per_tok": 2})
    assert table.architecture == "PhiMoEForCausalLM"
