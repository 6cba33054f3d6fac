"""What transformers builds in each decoder layer of the dev kit's tiny family models
(devkit/family_models.py): the modules a LoRA can target, with their kinds and shapes."""

from __future__ import annotations

from registry.base_models.module_table import ModuleEntry

LAYERS = (0, 1)


def linear(name: str, in_features: int, out_features: int) -> ModuleEntry:
    return ModuleEntry(f"model.layers.*.{name}", "linear", in_features, out_features, None, LAYERS)


def experts(name: str, in_features: int, out_features: int) -> ModuleEntry:
    return ModuleEntry(f"model.layers.*.mlp.experts.{name}", "expert_parameter", in_features,
                       out_features, 4, LAYERS)


ATTENTION = {linear("self_attn.q_proj", 128, 128), linear("self_attn.k_proj", 128, 64),
             linear("self_attn.v_proj", 128, 64), linear("self_attn.o_proj", 128, 128)}
LLAMA_SHAPED = ATTENTION | {linear("mlp.gate_proj", 128, 256), linear("mlp.up_proj", 128, 256),
                            linear("mlp.down_proj", 256, 128)}
LAYER_MODULES = {
    "llama": LLAMA_SHAPED,
    "mistral": LLAMA_SHAPED,
    "qwen2": LLAMA_SHAPED,
    # An explicit head_dim wider than hidden_size / heads: q is 4 x 64 wide, not 128.
    "qwen3": {linear("self_attn.q_proj", 128, 256), linear("self_attn.k_proj", 128, 128),
              linear("self_attn.v_proj", 128, 128), linear("self_attn.o_proj", 256, 128),
              linear("mlp.gate_proj", 128, 256), linear("mlp.up_proj", 128, 256),
              linear("mlp.down_proj", 256, 128)},
    "gemma2": LLAMA_SHAPED,
    # Fused projections: q, k and v in one module, gate and up in another.
    "phi3": {linear("self_attn.qkv_proj", 128, 256), linear("self_attn.o_proj", 128, 128),
             linear("mlp.gate_up_proj", 128, 512), linear("mlp.down_proj", 256, 128)},
    # Experts as 3-D parameters (experts, out, in), and a router that holds its weight itself.
    "mixtral": ATTENTION | {linear("mlp.gate", 128, 4), experts("gate_up_proj", 128, 512),
                            experts("down_proj", 256, 128)},
    # Routed experts beside a shared expert of plain linears, and its gate.
    "qwen2_moe": ATTENTION | {linear("mlp.gate", 128, 4), linear("mlp.shared_expert.gate_proj", 128, 64),
                              linear("mlp.shared_expert.up_proj", 128, 64),
                              linear("mlp.shared_expert.down_proj", 64, 128),
                              linear("mlp.shared_expert_gate", 128, 1),
                              experts("gate_up_proj", 128, 64), experts("down_proj", 32, 128)},
    # Latent attention: q is 4 heads x (16 + 64 rotary) wide; kv_a projects to the 512-wide latent
    # and the 64 rotary dims, kv_b from the latent to 4 heads x (16 keys + 32 values).
    "deepseek_v2": {linear("self_attn.q_proj", 128, 320), linear("self_attn.kv_a_proj_with_mqa", 128, 576),
                    linear("self_attn.kv_b_proj", 512, 192), linear("self_attn.o_proj", 128, 128),
                    linear("mlp.gate_proj", 128, 256), linear("mlp.up_proj", 128, 256),
                    linear("mlp.down_proj", 256, 128)},
}
