"""A canary's analysis policy, carried by its promotion (registry/canaries runs it)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid")
    weight: int = Field(ge=1, le=99, description="The canary's percent of the adapter's traffic.")
    manual_gate: bool = Field(False, description=(
        "After this step's analysis passes, wait for a reviewer to resume the canary "
        "(POST /v1/promotions/{id}/canary/resume) instead of going on."))


class CanaryAnalysis(BaseModel):
    """How the canary is judged against production, on the routers' metrics of the same window."""

    model_config = ConfigDict(extra="forbid")
    steps: list[Step] = Field(min_length=1, max_length=10, description=(
        "The canary's weights, in order. After the last step passes, it becomes production."))
    window_s: float = Field(60, ge=1, le=7 * 86400, description=(
        "The shortest a step lasts: its analysis covers the traffic since the step began, and it "
        "passes once its window is over and every check was judged and passed."))
    min_requests: int = Field(20, ge=1, le=10**7, description=(
        "Requests each side needs in a step before a check that compares them is judged (the "
        "canary's own error rate needs the canary's alone); failure included."))
    max_error_rate: float = Field(0.05, ge=0, le=1, description=(
        "Highest share of the canary's requests that may fail (its node's 5xx answers, timeouts, "
        "no node to answer, broken answers)."))
    max_error_rate_increase: float | None = Field(None, ge=0, le=1, description=(
        "Highest excess of the canary's error rate over production's in the same window."))
    max_ttft_p95_ratio: float | None = Field(2.0, gt=0, le=1000, description=(
        "Highest 95th percentile time to first token of the canary over production's."))
    max_latency_p95_ratio: float | None = Field(2.0, gt=0, le=1000, description=(
        "Highest 95th percentile request latency of the canary over production's."))
    min_tokens_per_s_ratio: float | None = Field(None, gt=0, le=1000, description=(
        "Lowest completion tokens per second of a canary request over production's."))
    shadow_fraction: float = Field(0, ge=0, le=0.5, description=(
        "Share of the canary's requests also answered by production, out of band, whose "
        "agreement with the canary's answer is reported beside the other metrics."))

    @model_validator(mode="after")
    def _rising(self) -> CanaryAnalysis:
        weights = [s.weight for s in self.steps]
        if weights != sorted(set(weights)):
            raise ValueError(f"step weights must rise, each once; got {weights}")
        return self
