from __future__ import annotations

from datetime import datetime

from typing import Annotated

from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field, UrlConstraints

from registry.names import NAME_PATTERN

EVENTS = ("promotion.requested", "promotion.approved", "promotion.activated", "promotion.rejected",
          "promotion.superseded", "promotion.rolled_back", "requalification.required",
          "requalification.cleared", "canary.step", "canary.awaiting_gate",
          "canary.awaiting_corroboration", "canary.paused",
          "canary.resumed", "canary.held", "canary.promoted", "canary.rolled_back")


class WebhookCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: Annotated[AnyHttpUrl, UrlConstraints(max_length=2000)] = Field(
        description="http(s) URL that receives a POST per event.")
    events: list[str] = Field(default_factory=lambda: ["*"], min_length=1, max_length=len(EVENTS) + 1,
                              description=f"Any of {', '.join(EVENTS)}, or '*' for all.")
    tenant: str | None = Field(None, max_length=64, pattern=NAME_PATTERN.pattern, description=(
        "Only this tenant's events. Omit (global admins only) for every tenant's."))


class WebhookOut(BaseModel):
    id: int
    url: str
    events: list[str]
    tenant: str | None
    created_by: str
    created_at: datetime


class WebhookCreated(WebhookOut):
    secret: str = Field(description="Signs every delivery. Shown once.")


class DeliveryOut(BaseModel):
    id: int
    webhook_id: int
    event: str
    state: str
    attempts: int
    last_status: int | None
    last_error: str | None
    created_at: datetime
    delivered_at: datetime | None
