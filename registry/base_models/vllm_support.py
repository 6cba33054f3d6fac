"""What the vLLM loraplane is tested on says about LoRA, per architecture.

The facts (vllm_lora_facts.json) are read from vLLM's own model classes by
`devkit.vllm_lora_facts`, never written by hand: which architectures serve LoRA at all, the
packed modules each one builds (its qkv_proj from q_proj, k_proj and v_proj), the embedding
modules it takes a LoRA on, whether it wants expert LoRA as 3-D tensors, and the modules whose
weight it folds into another (kv_b_proj under latent attention), whose LoRA it never applies. For an
architecture not in the file, the registry checks only the module table, and the pool's engine
judges the rest when it evaluates.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from registry.errors import Unprocessable

FACTS_FILE = Path(__file__).with_name("vllm_lora_facts.json")


@dataclass(frozen=True)
class LoraFacts:
    packed_modules: dict[str, list[str]]
    embedding_modules: frozenset[str]
    experts_3d: bool
    absorbed_modules: frozenset[str]


@cache
def _facts() -> dict:
    return json.loads(FACTS_FILE.read_text())


def version() -> str:
    return _facts()["vllm"]


def facts_for(architecture: str) -> LoraFacts | None:
    known = _facts()["lora"].get(architecture)
    if known is None:
        return None
    return LoraFacts(packed_modules=known["packed_modules"],
                     embedding_modules=frozenset(known["embedding_modules"]),
                     experts_3d=known["experts_3d"],
                     absorbed_modules=frozenset(known.get("absorbed_modules", ())))


def refuse_unserved(architecture: str) -> None:
    if architecture in _facts()["no_lora"]:
        raise Unprocessable(
            f"architecture {architecture!r} is served by vLLM {version()} without LoRA support",
            code="unsupported_architecture",
            hint="Register a base whose architecture vLLM serves LoRA adapters for; see "
                 "docs/families.md.")
