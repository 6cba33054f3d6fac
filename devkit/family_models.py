"""Tiny random-weight models of the families loraplane serves, and real peft adapters for them.

Each family's config is what transformers saves for a small model of it (hidden 128, 2 layers,
vocabulary 256): enough to register a base, derive its module table, and train nothing. The
weights are random, and so are both halves of an adapter's LoRAs, so that it changes the
model's output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# head_dim 32: vLLM's CPU attention takes no narrower head.
SIZES = {"hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
         "num_hidden_layers": 2, "vocab_size": 256, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
# family -> (model_type, architecture, what its config says beyond SIZES)
FAMILIES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "llama": ("llama", "LlamaForCausalLM", {"tie_word_embeddings": True}),
    "mistral": ("mistral", "MistralForCausalLM", {}),
    "qwen2": ("qwen2", "Qwen2ForCausalLM", {}),
    "qwen3": ("qwen3", "Qwen3ForCausalLM", {"head_dim": 64}),  # wider than hidden / heads
    "gemma2": ("gemma2", "Gemma2ForCausalLM", {"head_dim": 32}),
    "phi3": ("phi3", "Phi3ForCausalLM", {}),  # fused qkv_proj and gate_up_proj
    "mixtral": ("mixtral", "MixtralForCausalLM", {"num_local_experts": 4}),
    "qwen2_moe": ("qwen2_moe", "Qwen2MoeForCausalLM", {"num_experts": 4, "moe_intermediate_size": 32,
                                                       "shared_expert_intermediate_size": 64}),
    # Multi-head latent attention (kv_a_proj_with_mqa, kv_b_proj). vLLM's CPU latent attention
    # takes only a 512 + 64 wide latent, and every layer is dense: its MoE LoRA needs Triton.
    "deepseek_v2": ("deepseek_v2", "DeepseekV2ForCausalLM", {
        "kv_lora_rank": 512, "q_lora_rank": None, "qk_rope_head_dim": 64, "qk_nope_head_dim": 16,
        "v_head_dim": 32, "num_key_value_heads": 4, "n_routed_experts": 4, "n_shared_experts": 1,
        "moe_intermediate_size": 64, "num_experts_per_tok": 2, "first_k_dense_replace": 2,
        "topk_group": 1, "n_group": 1}),
}


def config_of(family: str) -> dict:
    """The family's config.json, as transformers saves it (model_type and architectures set)."""
    model_type, architecture, extra = FAMILIES[family]
    return {**SIZES, "model_type": model_type, "architectures": [architecture], **extra}


def build_base(family: str, folder: Path, *, seed: int = 0, tokenizer: Path | None = None) -> Path:
    """The family's tiny model, saved in `folder`; with the tokenizer of another tiny model
    (`tokenizer`, a folder), its vocabulary and special tokens, so that vLLM can serve it."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    config = config_of(family)
    if tokenizer is not None:
        loaded = PreTrainedTokenizerFast.from_pretrained(tokenizer)
        config.update(vocab_size=len(loaded), bos_token_id=loaded.bos_token_id,
                      eos_token_id=loaded.eos_token_id, pad_token_id=loaded.pad_token_id)
        loaded.save_pretrained(folder)
    settings = {key: value for key, value in config.items() if key != "model_type"}
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(config["model_type"], **settings))
    model.to(torch.float32).save_pretrained(folder)
    return folder


def build_adapter(base: Path, folder: Path, *, seed: int = 0, **lora: Any) -> Path:
    """A peft adapter of `base`, saved by peft's save_pretrained; `lora` is LoraConfig's."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base)
    torch.manual_seed(seed)
    # init_lora_weights=False: random A and B everywhere (embeddings too), so the adapter
    # changes the output; peft's default starts one of them at zero.
    config = LoraConfig(**{"r": 4, "lora_alpha": 8, "init_lora_weights": False, **lora})
    get_peft_model(model, config).save_pretrained(str(folder), save_embedding_layers=False)
    return folder
