from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from registry.promotions.analysis_policy import CanaryAnalysis
from registry.names import FREE_TEXT

ALIAS_PATTERN = r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$|^[a-z]$"
ADAPTER_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}/[a-z0-9][a-z0-9_-]{0,62}$"


class PromotionCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    adapter: str = Field(pattern=ADAPTER_PATTERN, max_length=129, description="tenant/name")
    version: int = Field(ge=1, le=2**31 - 1)
    alias: str = Field("production", pattern=ALIAS_PATTERN, max_length=32)
    weight: int | None = Field(None, ge=1, le=99, description="Canary traffic percent (1-99).")
    comment: str | None = Field(None, max_length=2000, pattern=FREE_TEXT)
    analysis: CanaryAnalysis | None = Field(None, description=(
        "A canary's analysis policy: the housekeeper judges it against production on live router "
        "metrics, steps its weight, then promotes it to production or rolls it back on its own. "
        "The weight is then the first step's."))

    @model_validator(mode="after")
    def _weight_only_for_canary(self) -> PromotionCreate:
        if self.analysis is not None:
            if self.alias != "canary":
                raise ValueError("only the 'canary' alias carries an analysis policy")
            first = self.analysis.steps[0].weight
            if self.weight not in (None, first):
                raise ValueError(f"the weight ({self.weight}) must be the first step's ({first}), or left out")
            self.weight = first
        if self.alias == "canary" and self.weight is None:
            raise ValueError("a canary needs a weight: the percent of traffic it receives (1-99)")
        if self.alias != "canary" and self.weight is not None:
            raise ValueError("only the 'canary' alias carries a weight")
        return self


class Decision(BaseModel):
    model_config = ConfigDict(extra="forbid")
    comment: str = Field(min_length=1, max_length=2000, pattern=FREE_TEXT,
                         description="Why: kept in the audit log beside the decision.")
    digest: str | None = Field(None, pattern=r"^[0-9a-f]{64}$", description=(
        "The version digest the reviewer was shown: an approval is refused (409 "
        "evaluated_bytes_changed) if the version no longer has it."))

    @field_validator("comment")
    @classmethod
    def _not_blank(cls, comment: str) -> str:
        if not comment.strip():
            raise ValueError("a comment must say why, not be blank")
        return comment


class GateOut(BaseModel):
    name: str
    passed: bool
    message: str
    hint: str = ""


class ApprovalCheck(BaseModel):
    allowed: bool
    reason: str = ""


class PromotionOut(BaseModel):
    id: int
    pool: str
    served_name: str
    tenant: str
    adapter: str
    version: int
    digest: str
    alias: str
    weight: int | None
    kind: str
    state: str
    gates: list[GateOut]
    previous_id: int | None
    requested_by: str
    comment: str | None
    decided_by: str | None
    decision_comment: str | None
    created_at: datetime
    decided_at: datetime | None
    activated_at: datetime | None
    ended_at: datetime | None
    analysis: CanaryAnalysis | None = None
    canary_state: str | None = Field(None, description=(
        "Where its analysis stands: analysing, waiting_for_traffic, paused, awaiting_gate, "
        "promoted or rolled_back (GET /v1/promotions/{id}/canary has the metrics)."))
    can_approve: ApprovalCheck | None = Field(None, description="Whether the caller may approve it, and why not.")
    policy_changes: list[str] | None = Field(None, description=(
        "While it awaits approval: how the adapter's evaluation policy changed since the production "
        "version went active (a weakening starts with 'weakens: '); null when nothing serves yet."))


class AliasOut(BaseModel):
    pool: str
    tenant: str
    adapter: str
    alias: str
    served_name: str
    version: int
    weight: int | None
    promotion_id: int
