from __future__ import annotations

from datetime import datetime
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_ADAPTER_SUITES = 16
# The metrics that measure the task, and so are compared between challenger and incumbent.
# parity and serving are properties of the engine and are held to their own thresholds instead.
QualityMetric = Literal["exact_match", "contains", "reference_loglik"]
QUALITY_METRICS: tuple[QualityMetric, ...] = get_args(QualityMetric)
FRACTIONS = {"exact_match", "contains"}  # scores in [0, 1]; reference_loglik is in nats
# How much lower than the incumbent's a challenger's value may be, where the policy names no
# margin: not worse at all on scores (greedy decoding is deterministic), and 0.1 nats of mean
# per-token log-likelihood, which two honest trainings of one task differ by.
DEFAULT_MARGINS: dict[str, float] = {"exact_match": 0.0, "contains": 0.0, "reference_loglik": 0.1}


class ChallengerPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    margins: dict[QualityMetric, float] = Field(default_factory=dict, description=(
        "Non-inferiority margin per metric: how much lower than the incumbent's the challenger's "
        "value may be (a fraction of examples for exact_match and contains, nats for "
        f"reference_loglik). Metrics left out use {DEFAULT_MARGINS}."))
    require_improvement: list[QualityMetric] = Field(default_factory=list, max_length=3, description=(
        "Metrics on which the challenger must be strictly better than the incumbent."))

    @model_validator(mode="after")
    def _check_margins(self) -> ChallengerPolicy:
        for metric, margin in self.margins.items():
            top = 1.0 if metric in FRACTIONS else 100.0
            if not 0 <= margin <= top:
                raise ValueError(f"the margin of {metric} must be between 0 and {top:g}, not {margin:g}")
        if len(set(self.require_improvement)) != len(self.require_improvement):
            raise ValueError("require_improvement names a metric twice")
        return self

    def margin(self, metric: QualityMetric) -> float:
        return self.margins.get(metric, DEFAULT_MARGINS[metric])


class EvaluationPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    required_suites: list[str] = Field(default_factory=list, max_length=MAX_ADAPTER_SUITES, description=(
        "Suites of the adapter's own task (the tenant's, tenant/name, or global ones): every "
        "version must pass them before a promotion, in every pool, besides the pool's suites. "
        "A challenger is compared with the incumbent on them."))
    challenger: ChallengerPolicy = Field(default_factory=ChallengerPolicy)

    @model_validator(mode="after")
    def _check_suites(self) -> EvaluationPolicy:
        if any(not 1 <= len(name) <= 129 for name in self.required_suites):
            raise ValueError("a suite name is 1 to 129 characters")
        if len(set(self.required_suites)) != len(self.required_suites):
            raise ValueError("required_suites names a suite twice")
        return self


class ProposedPolicy(BaseModel):
    policy: EvaluationPolicy
    weakens: list[str] = Field(description="How it would weaken the policy in force.")
    proposed_by: str
    proposed_at: datetime | None
    sha256: str = Field(description=(
        "Names this proposal: approving it sends this back, so that a proposal replaced after "
        "the approver read it is never the one approved."))


class PolicyApproval(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="The `proposed.sha256` the approver read.")


class EvaluationPolicyOut(EvaluationPolicy):
    tenant: str
    adapter: str
    effective_margins: dict[str, float] = Field(description="The margin each metric is held to.")
    proposed: ProposedPolicy | None = Field(None, description=(
        "A policy that would weaken this one, waiting for a second person to approve it "
        "(POST .../evaluation-policy/approve); until then this one is in force."))
