"""Reading the audit log: one filtered page of events, oldest first, within the caller's scope.
Tenant admins see their tenant's events; global admins see all, or one tenant's."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from registry.audit.schemas import AuditEventOut
from registry.auth.principal import Principal, Role
from registry.pagination import fetch_page
from registry.tables import AuditEvent, Tenant


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
    query = select(AuditEvent)
    if scope is not None:
        tenant_id = select(Tenant.id).where(Tenant.name == scope).scalar_subquery()
        query = query.where(AuditEvent.tenant_id == tenant_id)
    if filters.action is not None:
        query = query.where(AuditEvent.action == filters.action)
    if filters.actor is not None:
        query = query.where(AuditEvent.actor.contains(filters.actor, autoescape=True))
    if filters.subject is not None:
        query = query.where(AuditEvent.subject.startswith(filters.subject, autoescape=True))
    if filters.since is not None:
        query = query.where(AuditEvent.at >= filters.since)
    if filters.until is not None:
        query = query.where(AuditEvent.at < filters.until)
    rows, next_cursor = fetch_page(session, query, AuditEvent.id, limit=limit, cursor=cursor)
    return [AuditEventOut.model_validate(r, from_attributes=True) for r in rows], next_cursor
