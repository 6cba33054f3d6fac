"""A valid adapter to damage, and the safetensors encoding the attacks tamper with."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

CONFIG, WEIGHTS = "adapter_config.json", "adapter_model.safetensors"
PREFIX = "base_model.model.model.layers"


@dataclass(frozen=True, repr=False)
class Adapter:
    config: dict
    weights: bytes

    def __repr__(self) -> str:  # the weights can be megabytes
        return f"Adapter(r={self.config.get('r')}, {len(self.weights)} bytes of weights)"

    def config_bytes(self) -> bytes:
        return json.dumps(self.config).encode()

    def files(self, *, config: bytes | None = None, weights: bytes | None = None) -> list[tuple[str, bytes]]:
        return [(CONFIG, self.config_bytes() if config is None else config),
                (WEIGHTS, self.weights if weights is None else weights)]


def encode_header(header: dict | str | bytes, data: bytes = b"", *, declared: int | None = None) -> bytes:
    """A safetensors file: 8-byte little-endian header length, the header, then the data."""
    raw = header if isinstance(header, bytes) else (
        header if isinstance(header, str) else json.dumps(header)).encode()
    raw += b" " * (-len(raw) % 8)
    length = len(raw) if declared is None else declared
    return (length % 2**64).to_bytes(8, "little") + raw + data


def read_header(weights: bytes) -> tuple[dict, bytes]:
    length = int.from_bytes(weights[:8], "little")
    return json.loads(weights[8:8 + length]), weights[8 + length:]


def synthesize_adapter(base_config: dict, base_name: str, *, rank: int = 8,
                       modules: tuple[str, ...] = ("q_proj", "v_proj"), seed: int = 0) -> Adapter:
    """A rank-`rank` F32 adapter on the attention projections of a Llama-shaped base, its
    weights drawn from `seed`."""
    hidden, heads = base_config["hidden_size"], base_config["num_attention_heads"]
    head_dim = base_config.get("head_dim") or hidden // heads
    outputs = {"q_proj": heads * head_dim, "o_proj": hidden,
               "k_proj": base_config.get("num_key_value_heads", heads) * head_dim,
               "v_proj": base_config.get("num_key_value_heads", heads) * head_dim}
    inputs = {"q_proj": hidden, "k_proj": hidden, "v_proj": hidden, "o_proj": heads * head_dim}
    rng = np.random.default_rng(seed)
    header, blobs, offset = {}, [], 0
    for layer in range(base_config["num_hidden_layers"]):
        for module in modules:
            for side, shape in (("A", (rank, inputs[module])), ("B", (outputs[module], rank))):
                data = (rng.standard_normal(shape, dtype=np.float32) * 0.01).tobytes()
                header[f"{PREFIX}.{layer}.self_attn.{module}.lora_{side}.weight"] = {
                    "dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
                blobs.append(data)
                offset += len(data)
    config = {"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank, "bias": "none",
              "target_modules": list(modules), "base_model_name_or_path": base_name,
              "task_type": "CAUSAL_LM", "lora_dropout": 0.0}
    return Adapter(config, encode_header(header, b"".join(blobs)))
