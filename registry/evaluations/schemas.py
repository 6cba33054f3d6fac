from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from registry.pagination import Page


class EvaluationRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    suite: str = Field(min_length=1, max_length=129, description="A global suite's name, or tenant/name.")
    against: int | None = Field(None, ge=1, le=2**31 - 1, description=(
        "Another version of the same adapter (the incumbent): both are evaluated on the suite on "
        "one engine in one batch, and the challenger gate compares them."))
    again: bool = Field(False, description=(
        "Evaluate anew even if one passed: after a pool's engine changed, its gates count only "
        "evaluations that ran on that engine. An unfinished evaluation is still returned."))


class MetricResult(BaseModel):
    model_config = ConfigDict(extra="allow")  # a metric may add its measurements, e.g. tok/s
    value: float | None = Field(description="The adapter's score (null where not measured).")
    base: float | None = Field(None, description="The base model's score on the same engine.")
    threshold: dict[str, Any] = Field(default_factory=dict)
    passed: bool
    detail: str = ""


class ExampleOut(BaseModel):
    position: int
    prompt: str
    reference: str
    output: str
    base_output: str
    exact_match: bool
    contains: bool
    reference_loglik: float | None
    base_reference_loglik: float | None
    parity_max_logprob_diff: float | None
    parity_tokens_match: bool | None


class PairOut(BaseModel):
    """The other half of a challenger/incumbent comparison: both ran in one batch."""

    role: Literal["challenger", "incumbent"] = Field(description="This evaluation's role.")
    other_evaluation_id: int
    other_served_name: str
    other_state: str


class EvaluationOut(BaseModel):
    id: int
    served_name: str
    digest: str
    base_model: str
    suite: str
    state: str
    reason: str | None
    failing_metrics: list[str]
    metrics: dict[str, MetricResult]
    engine: dict[str, Any] | None
    timings: dict[str, Any] | None
    attempts: int
    requested_by: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    pair: PairOut | None = None
    examples: Page[ExampleOut] | None = Field(
        None, description="Per-example results, paged with examples_limit and examples_cursor.")
