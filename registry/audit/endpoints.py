from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Depends, Query
from sqlalchemy import select

from registry.audit.schemas import AuditEventOut, ChainReportOut, ProblemOut
from registry.audit.verify import verify_chain
from registry.auth.dependencies import authenticated
from registry.auth.principal import Principal, Role
from registry.db import transaction
from registry.pagination import Page, fetch_page
from registry.tables import AuditEvent, Tenant

router = APIRouter(prefix="/v1/audit", tags=["audit"])


@router.get("", response_model=Page[AuditEventOut])
def list_audit_events(
    action: str | None = Query(None, max_length=64, description="Exact action, e.g. promotion.approved."),
    actor: str | None = Query(None, max_length=128, description="Events whose actor contains this."),
    subject: str | None = Query(None, max_length=300, description="Events whose subject starts with this."),
    tenant: str | None = Query(None, max_length=64, description="Global admins: one tenant's events."),
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = Query(50, ge=1, le=200),
    cursor: str | None = Query(None, max_length=18),
    principal: Principal = Depends(authenticated),
):
    """Oldest first. Tenant admins see their tenant's events; global admins see all."""
    principal.require({Role.ADMIN}, tenant)
    scope = principal.tenant or tenant
    with transaction() as session:
        query = select(AuditEvent)
        if scope is not None:
            tenant_id = select(Tenant.id).where(Tenant.name == scope).scalar_subquery()
            query = query.where(AuditEvent.tenant_id == tenant_id)
        if action is not None:
            query = query.where(AuditEvent.action == action)
        if actor is not None:
            query = query.where(AuditEvent.actor.contains(actor, autoescape=True))
        if subject is not None:
            query = query.where(AuditEvent.subject.startswith(subject, autoescape=True))
        if since is not None:
            query = query.where(AuditEvent.at >= since)
        if until is not None:
            query = query.where(AuditEvent.at < until)
        rows, next_cursor = fetch_page(session, query, AuditEvent.id, limit=limit, cursor=cursor)
        return Page(items=[AuditEventOut.model_validate(r, from_attributes=True) for r in rows],
                    next_cursor=next_cursor)


@router.get("/verify", response_model=ChainReportOut)
def verify_audit_chain(principal: Principal = Depends(authenticated)):
    """Walk the whole hash chain (global admins): edited and removed events are listed."""
    principal.require_global_admin()
    with transaction() as session:
        report = verify_chain(session)
    return ChainReportOut(intact=report.intact, events=report.events, head=report.head,
                          problems=[ProblemOut(id=p.id, kind=p.kind, detail=p.detail)
                                    for p in report.problems])
