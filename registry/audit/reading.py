"""Reading the audit log: one filtered page of events, oldest first, within the caller's scope.
Tenant admins see their tenant's events; global admins see all, or one tenant's."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from registry.audit import repository
from registry.audit.schemas import AuditEventOut
from registry.auth.principal import Principal, Role


@dataclass(frozen=True)
class AuditFilters:
    action: str | None = None  # exact
    actor: str | None = None  # contains
    subject: str | None = None  # starts with
    tenant: str | None = None
    since: datetime | None = None
    until: datetime | None = None


def list_page(session: Session, principal: Principal, filters: AuditFilters, *, limit: int,
              cursor: str | None) -> tuple[list[AuditEventOut], str | None]:
    principal.require({Role.ADMIN}, filters.tenant)
    scope = principal.tenant or filters.tenant
    rows, next_cursor = repository.page_of_events(
        session, tenant=scope, action=filters.action, actor=filters.actor, subject=filters.subject,
        since=filters.since, until=filters.until, limit=limit, cursor=cursor)
    return [AuditEventOut.model_validate(r, from_attributes=True) for r in rows], next_cursor
