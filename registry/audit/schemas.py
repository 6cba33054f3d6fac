from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel


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


class ProblemOut(BaseModel):
    id: int
    kind: str
    detail: str


class ChainReportOut(BaseModel):
    intact: bool
    events: int
    head: str
    problems: list[ProblemOut]
