"""What a config.json must say before transformers is asked to build it: the checks that cost
nothing, so that a hostile or mistyped config never starts the costly derivation."""

from __future__ import annotations

import re
from typing import Any

from registry.base_models import vllm_support
from registry.errors import Unprocessable

HINT = "Send the model's Hugging Face config.json as it was saved."
# Sizes a skeleton is built from, each bounded so that building one stays cheap: every layer and
# expert is a module object, even on the meta device.
SIZE_LIMITS = {
    "hidden_size": 2**20, "intermediate_size": 2**22, "moe_intermediate_size": 2**22,
    "num_attention_heads": 2**12, "num_key_value_heads": 2**12, "head_dim": 2**14,
    "num_hidden_layers": 1024, "vocab_size": 2**24,
    "num_local_experts": 1024, "num_experts": 1024, "n_routed_experts": 1024,
}


def check(config: dict[str, Any]) -> str:
    """The architecture config.json names, once its sizes are plausible; Unprocessable if not."""
    architectures = config.get("architectures")
    if (not isinstance(architectures, list) or not architectures
            or not all(isinstance(name, str) and 0 < len(name) <= 200 for name in architectures)):
        raise Unprocessable("config.json has no 'architectures' list", code="invalid_base_config", hint=HINT)
    model_type = config.get("model_type")
    if model_type is not None and not (isinstance(model_type, str) and 0 < len(model_type) <= 100):
        raise Unprocessable("config.json field 'model_type' must be a short string",
                            code="invalid_base_config", hint=HINT)
    _refuse_code_loading(config, "")
    for section in (config, config.get("text_config")):
        if isinstance(section, dict):
            _check_sizes(section)
    architecture = architectures[0]
    vllm_support.refuse_unserved(architecture)
    return architecture


# Fields with which transformers runs code not installed here: a model's own Python (auto_map,
# trust_remote_code) or a kernel fetched from the hub (an implementation named org/repo).
CODE_FIELDS = ("auto_map", "trust_remote_code", "custom_pipelines", "kernel_config", "use_kernels")
IMPLEMENTATION_FIELDS = ("attn_implementation", "_attn_implementation", "experts_implementation",
                         "_experts_implementation")
BUILT_IN_IMPLEMENTATION = re.compile(r"^[a-z0-9_]{1,40}$")
MAX_DEPTH = 8


def _refuse_code_loading(section: dict[str, Any], path: str, depth: int = 0) -> None:
    """Every field that could make transformers load code, at any depth (sub-configs too)."""
    if depth > MAX_DEPTH:
        raise Unprocessable(f"config.json nests deeper than {MAX_DEPTH} levels", code="invalid_base_config",
                            hint=HINT)
    for key, value in section.items():
        where = f"{path}{key}"
        if key in CODE_FIELDS and value not in (None, False, {}):
            raise Unprocessable(f"config.json field {where!r} would load code that is not part of "
                                "transformers", code="invalid_base_config",
                                hint="loraplane builds a base's skeleton from transformers' own classes "
                                     "only: remove the field (vLLM must serve the architecture natively).")
        if key in IMPLEMENTATION_FIELDS and value is not None and not (
                isinstance(value, str) and BUILT_IN_IMPLEMENTATION.fullmatch(value)):
            raise Unprocessable(f"config.json field {where!r} names {str(value)[:80]!r}, not one of "
                                "transformers' built-in implementations", code="invalid_base_config",
                                hint="Remove the field or use a built-in one such as 'sdpa' or "
                                     "'eager': a kernel named org/repo is fetched and run from the hub.")
        _descend(value, where, depth)


def _descend(value: Any, where: str, depth: int) -> None:
    """Into sub-configs, those held in lists too (e.g. a list of per-layer configs)."""
    if isinstance(value, dict):
        _refuse_code_loading(value, f"{where}.", depth + 1)
    elif isinstance(value, list):
        if depth + 1 > MAX_DEPTH:
            raise Unprocessable(f"config.json nests deeper than {MAX_DEPTH} levels", code="invalid_base_config",
                                hint=HINT)
        for index, item in enumerate(value):
            if isinstance(item, (dict, list)):
                _descend(item, f"{where}[{index}]", depth + 1)


def _check_sizes(section: dict[str, Any]) -> None:
    for key, limit in SIZE_LIMITS.items():
        if key in section and section[key] is not None:
            value = section[key]
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= limit:
                raise Unprocessable(
                    f"config.json field {key!r} must be a positive integer of at most {limit}, got "
                    f"{str(value)[:40]!r}", code="invalid_base_config", hint=HINT)
    heads, kv_heads = section.get("num_attention_heads"), section.get("num_key_value_heads")
    if heads and kv_heads and heads % kv_heads:
        raise Unprocessable(
            f"num_attention_heads ({heads}) is not a multiple of num_key_value_heads ({kv_heads})",
            code="invalid_base_config", hint=HINT)
