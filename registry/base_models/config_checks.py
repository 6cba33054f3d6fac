"""What a config.json must say before transformers is asked to build it: the checks that cost
nothing, so that a hostile or mistyped config never starts the costly derivation."""

from __future__ import annotations

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
    for section in (config, config.get("text_config")):
        if isinstance(section, dict):
            _check_sizes(section)
    architecture = architectures[0]
    vllm_support.refuse_unserved(architecture)
    return architecture


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
