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
