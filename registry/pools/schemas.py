from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from registry.names import NAME_PATTERN

# The ranks vLLM accepts for --max-lora-rank.
VLLM_MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
Dtype = Literal["float16", "bfloat16", "float32"]
RequalifyPolicy = Literal["keep_serving", "suspend"]  # registry/active_set/reading/suspension.py
REQUALIFY_POLICY_DOC = ("What a version does after the pool's engine or base config changed, until "
                        "it passes the required suites again: keep_serving, or suspend (it leaves "
                        "the active set).")
CANARY_MIN_ROUTERS_DOC = ("Routers whose own traffic must each reach a canary's verdict before its "
                          "analysis steps, promotes or rolls it back (until then a reviewer decides). "
                          "1 lets a single router token decide.")
Overflow = Literal["refuse", "on_demand"]
OVERFLOW_DOC = ("What the pool does with more approved adapters than its nodes keep resident (the "
                "sum of their max_cpu_loras): refuse the promotion, or on_demand (the long tail: "
                "the most used stay resident, the others are loaded at their first request "
                "through vLLM's resolver, within cold_tier_bytes of each node's disk).")
COLD_TIER_DOC = ("With overflow on_demand: the disk each node's adapter cache may use, in bytes. "
                 "A promotion whose active set would not fit in it is refused.")
MIN_COLD_TIER_BYTES = 1
MAX_COLD_TIER_BYTES = 1 << 50
REQUIRED_SUITES_DOC = ("Global eval suites for the pool's base that every version must pass before it "
                       "is promoted here, each named once (at most 32).")


def _unique(names: list[str]) -> list[str]:
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"required_suites names {', '.join(map(repr, repeated))} more than once")
    return names


SuiteNames = Annotated[list[Annotated[str, Field(min_length=1, max_length=200)]],
                       Field(max_length=32), AfterValidator(_unique)]


class PoolCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=64, json_schema_extra={"pattern": NAME_PATTERN.pattern})
    base_model: str = Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")
    max_loras: int = Field(ge=1, le=256, description="vLLM --max-loras: adapters in one batch.")
    max_cpu_loras: int = Field(ge=1, le=4096, description="vLLM --max-cpu-loras: resident adapters.")
    max_lora_rank: int = Field(description=f"vLLM --max-lora-rank, one of {VLLM_MAX_LORA_RANKS}.")
    dtype: Dtype = "bfloat16"
    required_suites: SuiteNames = Field(default_factory=list, description=REQUIRED_SUITES_DOC)
    requalify_policy: RequalifyPolicy = Field("keep_serving", description=REQUALIFY_POLICY_DOC)
    canary_min_routers: int = Field(2, ge=1, le=16, description=CANARY_MIN_ROUTERS_DOC)
    overflow: Overflow = Field("refuse", description=OVERFLOW_DOC)
    cold_tier_bytes: int | None = Field(None, ge=MIN_COLD_TIER_BYTES, le=MAX_COLD_TIER_BYTES,
                                        description=COLD_TIER_DOC)

    @model_validator(mode="after")
    def _check_limits(self) -> PoolCreate:
        if self.max_lora_rank not in VLLM_MAX_LORA_RANKS:
            raise ValueError(f"max_lora_rank must be one of {VLLM_MAX_LORA_RANKS}")
        if self.max_cpu_loras < self.max_loras:
            raise ValueError("max_cpu_loras must be at least max_loras, as vLLM requires")
        check_overflow(self.overflow, self.cold_tier_bytes)
        return self


def check_overflow(overflow: str, cold_tier_bytes: int | None) -> None:
    if overflow == "on_demand" and cold_tier_bytes is None:
        raise ValueError("overflow on_demand needs cold_tier_bytes: the disk each node's adapter "
                         "cache may use for the versions it loads on demand")
    if overflow == "refuse" and cold_tier_bytes is not None:
        raise ValueError("cold_tier_bytes applies only to overflow on_demand")


class PoolOut(BaseModel):
    name: str
    base_model: str
    max_loras: int
    max_cpu_loras: int
    max_lora_rank: int
    dtype: str
    required_suites: list[str]
    requalify_policy: str
    canary_min_routers: int = 2
    overflow: str = "refuse"
    cold_tier_bytes: int | None = None
    created_at: datetime


class PoolUpdate(BaseModel):
    """What a global admin may change in a live pool; a field left out keeps its value."""
    model_config = ConfigDict(extra="forbid")
    requalify_policy: RequalifyPolicy | None = Field(None, description=REQUALIFY_POLICY_DOC)
    required_suites: SuiteNames | None = Field(
        None, description=REQUIRED_SUITES_DOC + " A suite added here is queued at once for every "
        "version the pool serves; the gates require it from the next promotion on.")
    canary_min_routers: int | None = Field(None, ge=1, le=16, description=CANARY_MIN_ROUTERS_DOC)
    overflow: Overflow | None = Field(None, description=OVERFLOW_DOC + " Switching to refuse needs "
                                      "an active set that fits resident.")
    cold_tier_bytes: int | None = Field(None, ge=MIN_COLD_TIER_BYTES, le=MAX_COLD_TIER_BYTES,
                                        description=COLD_TIER_DOC + " It may not shrink below "
                                        "what the active set needs.")

    @model_validator(mode="after")
    def _check_something_changes(self) -> PoolUpdate:
        if all(value is None for value in (self.requalify_policy, self.required_suites, self.canary_min_routers,
                                           self.overflow, self.cold_tier_bytes)):
            raise ValueError("give requalify_policy, required_suites, canary_min_routers, overflow, "
                             "cold_tier_bytes or several")
        return self
