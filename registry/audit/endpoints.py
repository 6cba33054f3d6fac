from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Depends, Query
from sqlalchemy.orm import Session

from registry.audit import reading
from registry.audit.reading import AuditFilters
from registry.audit.schemas import AuditEventOut, ChainReportOut, ExternalHeadOut, ProblemOut
from registry.audit.verify import verify_chain
from registry.auth.dependencies import authenticated
from registry.auth.principal import Principal
from registry.page_query import Paging
from registry.pagination import Page, PageRequest
from registry.request_session import RequestSession

router = APIRouter(prefix="/v1/audit", tags=["audit"])


@router.get("", response_model=Page[AuditEventOut])
def list_audit_events(
    action: str | None = Query(None, max_length=64, description="Exact action, e.g. promotion.approved."),
    actor: str | None = Query(None, max_length=128, description="Events whose actor contains this."),
    subject: str | None = Query(None, max_length=300, description="Events whose subject starts with this."),
    tenant: str | None = Query(None, max_length=64, description="Global admins: one tenant's events."),
    since: datetime | None = None,
    until: datetime | None = None,
    page: PageRequest = Paging,
    principal: Principal = Depends(authenticated),
    session: Session = RequestSession,
):
    """Oldest first. Tenant admins see their tenant's events; global admins see all."""
    filters = AuditFilters(action=action, actor=actor, subject=subject, tenant=tenant, since=since,
                           until=until)
    return Page.of(reading.list_page(session, principal, filters, limit=page.limit, cursor=page.cursor))


@router.get("/verify", response_model=ChainReportOut)
def verify_audit_chain(principal: Principal = Depends(authenticated),
                       session: Session = RequestSession):
    """Walk the whole hash chain (global admins): edited, removed and unkeyed events are listed,
    and the head this registry recorded outside the database must still be in the chain."""
    principal.require_global_admin()
    report = verify_chain(session)
    external = report.external_head
    return ChainReportOut(intact=report.intact, events=report.events, head=report.head,
                          problems=[ProblemOut(id=p.id, kind=p.kind, detail=p.detail)
                                    for p in report.problems],
                          external_head=ExternalHeadOut(**vars(external)) if external else None,
                          anchor=report.anchor)
