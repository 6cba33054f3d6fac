from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class BaseModelCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
    config: dict[str, Any] = Field(description="The model's Hugging Face config.json.")
    aliases: list[str] = Field(
        default_factory=list,
        max_length=16,
        description="Other names adapters may use in base_model_name_or_path (hub id, path).",
    )


class ModuleOut(BaseModel):
    name: str = Field(description="Qualified, with `*` for the layer number: "
                                  "model.layers.*.self_attn.q_proj.")
    kind: Literal["linear", "embedding", "expert_parameter"]
    in_features: int
    out_features: int
    experts: int | None = Field(description="The experts a 3-D expert parameter holds; null otherwise.")
    layers: int = Field(description="How many layers have the module; 0 for one outside the layers.")


class BaseModelOut(BaseModel):
    name: str
    aliases: list[str]
    architecture: str
    hidden_size: int
    num_layers: int
    vocab_size: int
    tied_embeddings: bool
    transformers: str = Field(description="The transformers version that derived the module table.")
    modules: list[ModuleOut] = Field(description="Every module and parameter a LoRA can target.")
    created_at: datetime


class AliasAdd(BaseModel):
    model_config = ConfigDict(extra="forbid")
    alias: str = Field(min_length=1, max_length=200, description=(
        "Another name adapters may use in base_model_name_or_path (a hub id or a path): 1-200 "
        "printable characters, not the name or an alias of another base."))
