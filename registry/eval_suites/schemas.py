from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, model_validator

from registry.names import NAME_PATTERN

MAX_EXAMPLES = 5000
MAX_TEXT = 4096


class Example(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompt: str = Field(min_length=1, max_length=MAX_TEXT)
    reference: str = Field(min_length=1, max_length=MAX_TEXT)


class MinScore(BaseModel):
    model_config = ConfigDict(extra="forbid")
    min: float = Field(ge=0, le=1, description="Fraction of examples that must score.")


class LoglikMargin(BaseModel):
    model_config = ConfigDict(extra="forbid")
    min_margin: float = Field(
        ge=-100, le=100,
        description="Adapter minus base mean per-token log-probability of the reference.")


class ParityTolerance(BaseModel):
    """Unset values take the tolerance measured for the engine's dtype (float32: 1e-3 and 0;
    bfloat16 and float16 wider: docs/operations.md, "Parity tolerance per dtype")."""
    model_config = ConfigDict(extra="forbid")
    max_logprob_diff: float | None = Field(None, gt=0, le=10, description=(
        "Largest allowed |logprob| difference per generated token between the engine with the "
        "adapter and the merged-weights reference. Unset: the measured tolerance of the engine's "
        "dtype."))
    max_token_mismatch_rate: float | None = Field(None, ge=0, le=1, description=(
        "Fraction of examples whose greedy tokens may differ from the reference. Unset: the "
        "measured tolerance of the engine's dtype."))


class ServingLimits(BaseModel):
    """Measured like for like: the adapter and the base each run the suite's prompts as bursts of
    the same concurrency, each request generating max_tokens (ignore_eos), alternating base,
    adapter, adapter, base on the same engine."""

    model_config = ConfigDict(extra="forbid")
    min_throughput_ratio: float = Field(0.2, gt=0, le=10, description=(
        "Output tokens/s of the adapter's bursts over the base's."))
    max_ttft_ratio: float | None = Field(None, gt=0, le=1000, description=(
        "Median time to first token in the adapter's bursts over the base's."))
    rounds: int = Field(1, ge=1, le=5, description=(
        "How many times the base-adapter-adapter-base sequence of bursts runs."))
    prompts: int = Field(16, ge=1, le=512, description=(
        "Prompts per burst: the suite's first ones (all of them, if it has fewer)."))


class SuiteMetrics(BaseModel):
    model_config = ConfigDict(extra="forbid")
    exact_match: MinScore | None = None
    contains: MinScore | None = None
    reference_loglik: LoglikMargin | None = None
    parity: ParityTolerance | None = None
    serving: ServingLimits | None = None

    @model_validator(mode="after")
    def _at_least_one(self) -> SuiteMetrics:
        if not any(getattr(self, name) is not None for name in type(self).model_fields):
            raise ValueError("a suite needs at least one metric")
        return self


class Generation(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_tokens: int = Field(32, ge=1, le=512)
    stop: list[str] = Field(default_factory=list, max_length=4)
    ignore_eos: bool = Field(False, description="Always generate max_tokens (for load tests).")

    @model_validator(mode="after")
    def _check_stop(self) -> Generation:
        if any(not 1 <= len(s) <= 32 for s in self.stop):
            raise ValueError("each stop string must be 1 to 32 characters")
        return self


class SuiteCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=64, json_schema_extra={"pattern": NAME_PATTERN.pattern})
    tenant: str | None = Field(None, max_length=64, json_schema_extra={"pattern": NAME_PATTERN.pattern},
                               description="The tenant that owns the suite (its admins and uploaders "
                                           "create it; only it sees the suite). Omitted: a global "
                                           "suite, created by a global admin.")
    base_model: str = Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")
    examples: list[Example] = Field(min_length=1, max_length=MAX_EXAMPLES)
    metrics: SuiteMetrics
    generation: Generation = Field(default_factory=Generation)


class SuiteOut(BaseModel):
    name: str  # a global suite's name, or tenant/name
    tenant: str | None = None
    base_model: str
    dataset_sha256: str
    example_count: int
    metrics: SuiteMetrics
    generation: Generation
    created_by: str
    created_at: datetime
