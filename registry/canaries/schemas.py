from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class SideMetrics(BaseModel):
    served_name: str
    requests: int
    errors: dict[str, int]
    error_rate: float | None
    ttft_p95_ms: float | None
    latency_p95_ms: float | None
    tokens_per_s: float | None
    shadow_agreement: float | None = None
    shadow_compared: int = 0


class Check(BaseModel):
    metric: str
    passed: bool | None = Field(description="None: not judged (too little traffic on a side).")
    canary: float | None
    production: float | None
    limit: float
    detail: str


class CanaryStatus(BaseModel):
    promotion_id: int
    step: int = Field(description="Index into the policy's steps.")
    weight: int
    state: str = Field(description="analysing, waiting_for_traffic, awaiting_corroboration, paused, "
                                   "awaiting_gate, promoted, rolled_back")
    step_started_at: datetime
    checked_at: datetime | None = None
    canary: SideMetrics | None = None
    production: SideMetrics | None = None
    checks: list[Check] = Field(default_factory=list)
    verdict: str | None = None
    sources: dict[str, str] = Field(default_factory=dict, description=(
        "Each router's own verdict on its own traffic alone: pass, fail or wait."))
    sources_needed: int = Field(1, description=(
        "Routers that must each reach the verdict before the analysis acts on it (the pool's "
        "canary_min_routers); short of them, it awaits corroboration or a reviewer."))
    unsealed_windows: int = Field(0, description=(
        "Traffic windows of this step whose seal did not hold: written to the database by "
        "something other than a registry, and not counted."))
    analysis_sealed: bool = Field(True, description=(
        "False when the canary's analysis policy or state was written by something other than a "
        "registry (its seal does not hold): it is neither judged nor acted on; roll it back."))
