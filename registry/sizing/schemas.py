from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

Source = Literal["measured", "assumed"]


class Figure(BaseModel):
    value: int | float | None
    unit: str
    source: Source
    note: str


@dataclass(frozen=True)
class SizingInputs:
    """The caller's assumptions; None means "use the default" (or, for adapters, the pool's
    active set)."""
    gpu_hour_usd: float | None = None
    gpu_memory_gib: float | None = None
    tokens_per_s: float | None = None
    lora_throughput_penalty: float | None = None
    demand_tokens_per_s: float | None = None
    weights_fraction: float | None = None
    adapters: int | None = None


class ActiveSetFigures(BaseModel):
    versions: Figure
    largest_rank: Figure
    artifact_bytes: Figure


class LoraSlots(BaseModel):
    max_loras: Figure
    max_lora_rank: Figure
    dtype_bytes: Figure
    per_slot: Figure
    total: Figure


class RankWaste(BaseModel):
    wasted: Figure
    recommended_max_lora_rank: Figure


class Assumptions(BaseModel):
    gpu_hour_usd: Figure
    gpu_memory_gib: Figure
    tokens_per_s: Figure
    lora_throughput_penalty: Figure
    demand_tokens_per_s: Figure
    weights_fraction: Figure
    adapters: Figure


class Deployment(BaseModel):
    replicas: Figure
    gpus_per_replica: Figure
    gpus: Figure
    memory_per_replica: Figure
    gpu_memory: Figure
    cost_per_1m_tokens: Figure


class Comparison(BaseModel):
    assumptions: Assumptions
    base_weights: Figure
    weights_budget_per_gpu: Figure
    full_replicas: Deployment
    multi_lora: Deployment
    gpu_ratio: Figure
    cost_ratio: Figure


class SizingOut(BaseModel):
    pool: str
    scope: str = Field("pool", description=(
        "What the active-set figures count: the whole pool (global admins), or 'tenant NAME', "
        "the caller's own versions in it."))
    base_model: str
    dtype: str
    active_set: ActiveSetFigures
    lora_slots: LoraSlots
    rank_waste: RankWaste
    comparison: Comparison
