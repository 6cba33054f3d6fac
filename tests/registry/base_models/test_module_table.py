"""The module table comes from the real architecture: transformers builds each family's skeleton
from its config.json, in a process of its own, and every module a LoRA can target is listed.
A derivation that hangs or dies costs that derivation only."""

from __future__ import annotations

import os
import signal
import threading

import psutil
import pytest

from devkit.family_models import SIZES, config_of
from devkit.services import wait_until
from registry.base_models.derivation import MAX_CONFIG_BYTES, derive
from registry.base_models.module_table import ModuleTable
from registry.errors import Unavailable, Unprocessable

# Tiny sizes, and so many layers that building them takes minutes.
ENDLESS = {**SIZES, "model_type": "llama", "num_hidden_layers": 10_000_000}


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
        derive(config, timeout_s=0)  # a derivation would run out of time at once
    assert refused.value.code == "invalid_base_config"
    assert f"at most {MAX_CONFIG_BYTES} are accepted" in str(refused.value)


def test_a_derivation_past_its_time_is_killed_and_the_next_one_runs():
    with pytest.raises(Unprocessable) as refused:
        derive(ENDLESS, timeout_s=2)
    assert refused.value.code == "invalid_base_config"
    assert str(refused.value) == "building the model from config.json took over 2 s"
    assert not _derivations()  # killed, not left running
    assert derive(config_of("llama")).architecture == "LlamaForCausalLM"


def test_a_derivation_killed_midway_is_reported_and_the_next_one_runs():
    failed: list[Exception] = []
    running = threading.Thread(target=lambda: _record_failure(failed, ENDLESS))
    running.start()
    wait_until(lambda: len(_derivations()) == 1, timeout_s=30, what="a derivation to start")
    _derivations()[0].send_signal(signal.SIGKILL)
    running.join(timeout=30)

    assert len(failed) == 1 and isinstance(failed[0], Unavailable)
    assert failed[0].code == "derivation_failed"
    assert str(failed[0]) == "deriving the module table failed: its process was killed by signal 9 (Killed)"
    assert derive(config_of("llama")).architecture == "LlamaForCausalLM"


def test_a_warm_process_that_died_is_started_again_by_the_next_derivation():
    derive(config_of("llama"))
    warm = _warm_processes()
    assert len(warm) == 1
    warm[0].kill()
    # Dead, and not reaped here: the next derivation finds it so, as the registry would.
    wait_until(lambda: warm[0].status() == psutil.STATUS_ZOMBIE, timeout_s=30, what="the warm process to die")

    assert derive(config_of("qwen2")).architecture == "Qwen2ForCausalLM"
    assert len(_warm_processes()) == 1 and _warm_processes()[0].pid != warm[0].pid


def test_derivations_from_several_threads_at_once_each_get_their_own_table():
    """The registry derives from its request threads: each derivation is its own process."""
    families = ("llama", "qwen2", "phi3", "gemma2")
    tables: dict[str, str] = {}

    def one(family: str) -> None:
        tables[family] = derive(config_of(family)).architecture

    threads = [threading.Thread(target=one, args=(family,)) for family in families]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert tables == {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "phi3": "Phi3ForCausalLM",
                      "gemma2": "Gemma2ForCausalLM"}
    assert not _derivations()


def _record_failure(failed: list[Exception], config: dict) -> None:
    try:
        derive(config, timeout_s=120)
    except (Unavailable, Unprocessable) as error:
        failed.append(error)


def _warm_processes() -> list[psutil.Process]:
    """This process's fork server: it imported torch once, and forks every derivation."""
    return [child for child in psutil.Process(os.getpid()).children()
            if "multiprocessing.forkserver" in " ".join(child.cmdline())]


def _derivations() -> list[psutil.Process]:
    return [child for warm in _warm_processes() for child in warm.children()]


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


def derive_under_address_space_limit(gib: float) -> str:
    """What a registry running under `ulimit -v` reads when it derives, as one line."""
    import subprocess
    import sys

    script = (f"import resource; limit = int({gib} * 1024**3); "
              "resource.setrlimit(resource.RLIMIT_AS, (limit, limit)); "
              "from registry.base_models.derivation import derive; from devkit.family_models import SIZES\n"
              "try:\n    print('table', len(derive({**SIZES, 'model_type': 'llama'}).modules))\n"
              "except Exception as error:\n    print(type(error).__name__, error.status, error, '|', error.hint)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    return done.stdout.strip().splitlines()[-1]


def test_a_registry_under_a_lower_memory_limit_than_a_derivations_still_derives():
    """The derivation's own 4 GiB limit cannot be raised above the registry's: it takes the lower."""
    assert derive_under_address_space_limit(1.5).startswith("table ")


def test_a_registry_with_too_little_memory_to_derive_is_told_so_and_how_much_it_needs():
    line = derive_under_address_space_limit(0.6)
    assert line.startswith("Unavailable 503 deriving the module table ran out of memory"), line
    assert "address-space limit of 0.6 GiB, and a derivation may use up to 4.0 GiB" in line
    assert "Raise the registry's address-space limit (ulimit -v" in line
