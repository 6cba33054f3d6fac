from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from sqlalchemy import select

from registry.audit.schemas import AuditEventOut
from registry.auth.dependencies import authenticated
from registry.auth.principal import Principal, Role
from registry.db import transaction
from registry.pagination import Page, fetch_page
from registry.tables import AuditEvent, Tenant

router = APIRouter(prefix="/v1/audit-events", tags=["audit"])


@router.get("", response_model=Page[AuditEventOut])
def list_audit_events(
    action: str | None = Query(None, max_length=64),
    limit: int = Query(50, ge=1, le=200),
    cursor: str | None = Query(None, max_length=18),
    principal: Principal = Depends(authenticated),
):
    principal.require({Role.ADMIN})
    with transaction() as session:
        query = select(AuditEvent)
        if not principal.is_global_admin:
            tenant_id = select(Tenant.id).where(Tenant.name == principal.tenant).scalar_subquery()
            query = query.where(AuditEvent.tenant_id == tenant_id)
        if action is not None:
            query = query.where(AuditEvent.action == action)
        rows, next_cursor = fetch_page(session, query, AuditEvent.id, limit=limit, cursor=cursor)
        return Page(items=[AuditEventOut.model_validate(r, from_attributes=True) for r in rows],
                    next_cursor=next_cursor)
