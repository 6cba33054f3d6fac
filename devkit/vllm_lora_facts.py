"""Write what an installed vLLM says about LoRA for each architecture it serves, for the registry.

    .venv-vllm/bin/python -m devkit.vllm_lora_facts registry/base_models/vllm_lora_facts.json

For every model class vLLM registers and can import here: whether it serves LoRA at all, and if
it does, its packed modules (qkv_proj from q, k and v), the embedding modules it takes a LoRA on,
whether it wants expert LoRA as 3-D tensors, and the modules it absorbs (its multi-head latent
attention folds kv_b_proj's weight into the attention, so a LoRA on kv_b_proj is never applied
as trained). These are read from the classes and their modules, without building a model.
Classes that cannot be imported here (they need a package this vLLM build
lacks) are left out: the registry leaves an architecture it has no facts for to the engine.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def facts() -> dict:
    import vllm
    from vllm.model_executor.models.interfaces import supports_lora
    from vllm.model_executor.models.registry import ModelRegistry

    lora, no_lora = {}, []
    for architecture in sorted(ModelRegistry.get_supported_archs()):
        try:
            model_class = ModelRegistry._try_load_model_cls(architecture)
        except Exception:  # noqa: BLE001 - a class this build cannot import says nothing
            model_class = None
        if model_class is None:
            continue
        if not supports_lora(model_class):
            no_lora.append(architecture)
            continue
        lora[architecture] = {
            "packed_modules": {name: list(parts) for name, parts in
                               (getattr(model_class, "packed_modules_mapping", None) or {}).items()},
            "embedding_modules": sorted(getattr(model_class, "embedding_modules", None) or {}),
            "experts_3d": bool(getattr(model_class, "is_3d_moe_weight", False)),
            "absorbed_modules": ["kv_b_proj"] if _latent_attention(model_class) else [],
        }
    return {"vllm": vllm.__version__, "lora": lora, "no_lora": no_lora}


def _latent_attention(model_class) -> bool:
    """Whether the class (or one it derives from) attends through vLLM's multi-head latent
    attention layer."""
    from vllm.model_executor.layers.mla import MultiHeadLatentAttentionWrapper

    return any(getattr(sys.modules.get(cls.__module__), "MultiHeadLatentAttentionWrapper", None)
               is MultiHeadLatentAttentionWrapper for cls in model_class.__mro__)


def main() -> None:
    target = Path(sys.argv[1])
    target.write_text(json.dumps(facts(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
