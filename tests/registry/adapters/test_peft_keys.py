"""adapter_config.json holds only the keys peft writes, and the options PEFT acts on when the
evaluation loads an adapter only with their inert defaults.

Before, any key passed: `"init_lora_weights": "pissa"` made `PeftModel.from_pretrained` in the
evaluation worker run an SVD of every targeted base weight and change those weights (minutes of
CPU on a real base, from one upload).
"""

from __future__ import annotations

import dataclasses
import json

import peft
import pytest

from registry.adapters.peft_keys import KNOWN_KEYS, PEFT_VERSION, TASK_TYPES
from tests.support.asserts import assert_refused

CONFIG, WEIGHTS = "adapter_config.json", "adapter_model.safetensors"
INITIALISES = ("only true or false is accepted, because peft runs this initialisation when the "
               "evaluation loads the adapter, before the saved weights: pissa, olora, corda and loftq "
               "rewrite the base weights (pissa and corda after an SVD of each one)")
REGEX_RUNS = "matched against every module name by re, without a time limit"


@pytest.fixture(scope="module")
def adapter(make_adapter, base_model) -> tuple[dict, bytes]:
    folder = make_adapter(seed=3)
    return json.loads((folder / CONFIG).read_text()), (folder / WEIGHTS).read_bytes()


def upload(uploader, adapter, config: dict, name: str = "refused"):
    _, weights = adapter
    return uploader.post(f"/v1/adapters/acme/{name}/versions",
                         files=[("file", (CONFIG, json.dumps(config).encode())), ("file", (WEIGHTS, weights))])


def test_the_keys_are_those_of_the_installed_peft():
    """When peft is upgraded, this says which keys to add to (or drop from) peft_keys."""
    installed = {field.name for field in dataclasses.fields(peft.LoraConfig)}
    assert peft.__version__ == PEFT_VERSION
    assert KNOWN_KEYS == installed
    assert set(TASK_TYPES) == {task.value for task in peft.TaskType}


REFUSED = [
    # (id, changes, message)
    ("pissa", {"init_lora_weights": "pissa"}, f'init_lora_weights is "pissa"; {INITIALISES}'),
    ("pissa_niter", {"init_lora_weights": "pissa_niter_4"}, 'init_lora_weights is "pissa_niter_4"; only'),
    ("olora", {"init_lora_weights": "olora"}, 'init_lora_weights is "olora"; only true or false'),
    ("init_as_number", {"init_lora_weights": 1}, "init_lora_weights is 1; only true or false"),
    ("loftq", {"loftq_config": {"loftq_bits": 4, "loftq_iter": 1}},
     'loftq_config is {"loftq_bits": 4, "loftq_iter": 1}; only {} or null is accepted, because it '
     "configures an initialisation that peft runs on the base weights"),
    ("eva", {"eva_config": {"rho": 2.0}}, 'eva_config is {"rho": 2.0}; only null is accepted'),
    ("corda", {"corda_config": {"corda_method": "kpm"}}, "corda_config is"),
    ("megatron", {"megatron_config": {"num_layers": 2}}, "megatron_config is"),
    ("megatron_core", {"megatron_core": "os"},
     'megatron_core is "os"; only "megatron.core" or null is accepted, because peft imports the '
     "module it names"),
    ("auto_mapping_module", {"auto_mapping": {"base_model_class": "X", "parent_library": "os"}},
     'auto_mapping is {"base_model_class": "X", "parent_library": "os"}; it must be null, or name a '
     "transformers class"),
    ("exclude_regex", {"exclude_modules": "(.*)*x"}, f'exclude_modules is "(.*)*x"; a regex is {REGEX_RUNS}'),
    ("rank_pattern_many_keys", {"rank_pattern": {f"m{i}": 8 for i in range(65)}},
     'rank_pattern is {"m0": 8, "m1": 8, "m2": 8, "m3": 8, "m4": 8, "m5": 8, "m...; it must be an '
     "object of at most 64 module-name patterns, or null"),
    ("trainable_tokens", {"trainable_token_indices": [1, 2]},
     "trainable_token_indices is [1, 2]; only null is accepted, because vLLM does not serve trained "
     "token embeddings"),
    ("layer_replication", {"layer_replication": [[0, 2], [1, 2]]},
     "layer_replication is [[0, 2], [1, 2]]; only null is accepted, because peft acts on it when the "
     "evaluation loads the adapter: it changes the base model's layers"),
    ("runtime_gpu_offload", {"runtime_config": {"ephemeral_gpu_offload": True}}, "runtime_config is"),
    ("alora", {"alora_invocation_tokens": [5]},
     "alora_invocation_tokens is [5]; only null is accepted, because it makes a LoRA variant that "
     "the registry does not check or serve"),
    ("task_type", {"task_type": "PREFIX"}, 'task_type is "PREFIX"; only null or "SEQ_CLS"'),
    ("dropout", {"lora_dropout": 2}, "lora_dropout is 2; it must be a number from 0 up to"),
]


@pytest.mark.parametrize(("changes", "message"), [case[1:] for case in REFUSED], ids=[c[0] for c in REFUSED])
def test_an_option_peft_acts_on_is_refused_unless_inert(uploader, adapter, stored_state, changes, message):
    before = stored_state()

    response = upload(uploader, adapter, {**adapter[0], **changes})

    assert_refused(response, 422, "config_option_refused", f"adapter_config.json: {message}")
    assert response.json()["error"]["hint"]
    assert stored_state() == before
    assert uploader.get("/readyz").status_code == 200


def test_init_lora_weights_says_how_to_convert(uploader, adapter):
    response = upload(uploader, adapter, {**adapter[0], "init_lora_weights": "pissa"})
    assert "path_initial_model_for_weight_conversion" in response.json()["error"]["hint"]


def test_unknown_keys_are_refused_by_name(uploader, adapter, stored_state):
    before = stored_state()

    response = upload(uploader, adapter, {**adapter[0], "use_magic": True, "future_option": 1})

    assert_refused(response, 422, "unknown_config_key",
                   "adapter_config.json: unknown keys 'future_option', 'use_magic'; the registry "
                   f"accepts the keys of peft {PEFT_VERSION}'s LoraConfig")
    assert f"peft {PEFT_VERSION} or older" in response.json()["error"]["hint"]
    assert stored_state() == before
    assert uploader.get("/readyz").status_code == 200


@pytest.mark.parametrize("changes", [
    {"init_lora_weights": False},
    # As peft writes a config without task_type: the base's transformers class.
    {"task_type": None, "auto_mapping": {"base_model_class": "LlamaForCausalLM",
                                         "parent_library": "transformers.models.llama.modeling_llama"}},
    {"use_rslora": True, "lora_dropout": 0.05, "exclude_modules": ["o_proj"], "loftq_config": {}},
    {"runtime_config": {"ephemeral_gpu_offload": False}, "megatron_core": None},
], ids=["init_false", "auto_mapping", "inert_options", "runtime_default"])
def test_inert_values_are_accepted(uploader, adapter, changes):
    """Guards the table: what peft writes by default, or with options vLLM serves, passes."""
    response = upload(uploader, adapter, {**adapter[0], **changes}, name="inert")
    assert response.status_code == 201, response.text  # each config differs: a new version each
