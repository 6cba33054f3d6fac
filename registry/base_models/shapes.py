"""What a Hugging Face config says about the projections a LoRA may target."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from registry.errors import Unprocessable

# Decoder-only architectures whose layers name their projections the Llama way.
LLAMA_LIKE = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"}
ATTENTION_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_MODULES = ("gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class BaseShape:
    architecture: str
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    num_layers: int
    vocab_size: int

    def projections(self) -> dict[str, tuple[int, int]]:
        """(in_features, out_features) of every module a LoRA can target, by module name."""
        q_out = self.num_attention_heads * self.head_dim
        kv_out = self.num_key_value_heads * self.head_dim
        h, i = self.hidden_size, self.intermediate_size
        return {
            "q_proj": (h, q_out),
            "k_proj": (h, kv_out),
            "v_proj": (h, kv_out),
            "o_proj": (q_out, h),
            "gate_proj": (h, i),
            "up_proj": (h, i),
            "down_proj": (i, h),
        }

    @staticmethod
    def module_parent(module: str) -> str:
        return "self_attn" if module in ATTENTION_MODULES else "mlp"


def shape_from_config(config: dict[str, Any]) -> BaseShape:
    architectures = config.get("architectures") or []
    if not isinstance(architectures, list) or not architectures:
        raise Unprocessable(
            "config.json has no 'architectures' list",
            code="invalid_base_config",
            hint="Send the model's Hugging Face config.json as it was saved.",
        )
    architecture = architectures[0]
    if architecture not in LLAMA_LIKE:
        raise Unprocessable(
            f"architecture {architecture!r} is not supported",
            code="unsupported_architecture",
            hint=f"Supported: {', '.join(sorted(LLAMA_LIKE))}.",
        )
    fields = {}
    for key in ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers",
                "vocab_size"):
        fields[key] = _positive_int(config, key)
    heads = fields["num_attention_heads"]
    kv_heads = _positive_int(config, "num_key_value_heads") if "num_key_value_heads" in config else heads
    head_dim = (
        _positive_int(config, "head_dim")
        if config.get("head_dim") is not None
        else fields["hidden_size"] // heads
    )
    if heads % kv_heads:
        raise Unprocessable(
            f"num_attention_heads ({heads}) is not a multiple of num_key_value_heads ({kv_heads})",
            code="invalid_base_config",
            hint="Send the model's Hugging Face config.json as it was saved.",
        )
    return BaseShape(
        architecture=architecture,
        hidden_size=fields["hidden_size"],
        intermediate_size=fields["intermediate_size"],
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        num_layers=fields["num_hidden_layers"],
        vocab_size=fields["vocab_size"],
    )


def _positive_int(config: dict[str, Any], key: str) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**31:
        raise Unprocessable(
            f"config.json field {key!r} must be a positive integer, got {value!r}",
            code="invalid_base_config",
            hint="Send the model's Hugging Face config.json as it was saved.",
        )
    return value
