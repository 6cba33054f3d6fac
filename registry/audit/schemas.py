from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field


class AuditEventOut(BaseModel):
    id: int
    at: datetime
    actor: str
    action: str
    subject: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    prev_hash: str
    hash: str
    hash_scheme: str


class ProblemOut(BaseModel):
    id: int
    kind: str
    detail: str


class ExternalHeadOut(BaseModel):
    last_id: int
    last_hash: str
    count: int
    at: str


class ChainReportOut(BaseModel):
    intact: bool
    events: int
    head: str
    problems: list[ProblemOut]
    external_head: ExternalHeadOut | None = Field(
        description="The signed head this registry recorded outside the database, if any.")
    anchor: str = Field(description="What the check of that head found, in words.")
