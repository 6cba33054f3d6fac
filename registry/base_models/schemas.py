from __future__ import annotations

from datetime import datetime
from typing import Any

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


class BaseModelOut(BaseModel):
    name: str
    aliases: list[str]
    architecture: str
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    num_layers: int
    vocab_size: int
    projections: dict[str, tuple[int, int]]
    created_at: datetime
