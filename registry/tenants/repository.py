"""The queries of tenants: their pages and what they hold. Finding or locking one tenant by name
is registry.auth.repository's (tokens need it first)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from registry.pagination import fetch_page
from registry.tables import Adapter, ApiToken, Tenant


def page_of_tenants(session: Session, *, name: str | None, limit: int,
                    cursor: str | None) -> tuple[list[Tenant], str | None]:
    """Every tenant in id order, or the one named `name`."""
    query = select(Tenant)
    if name is not None:
        query = query.where(Tenant.name == name)
    return fetch_page(session, query, Tenant.id, limit=limit, cursor=cursor)


def adapter_counts(session: Session, tenant_ids: list[int]) -> dict[int, int]:
    rows = session.execute(select(Adapter.tenant_id, func.count()).where(
        Adapter.tenant_id.in_(tenant_ids)).group_by(Adapter.tenant_id))
    return {tenant_id: count for tenant_id, count in rows}


def active_token_counts(session: Session, tenant_ids: list[int], now: datetime) -> dict[int, int]:
    """Tokens neither revoked nor expired, per tenant."""
    rows = session.execute(select(ApiToken.tenant_id, func.count()).where(
        ApiToken.tenant_id.in_(tenant_ids), ApiToken.revoked_at.is_(None),
        or_(ApiToken.expires_at.is_(None), ApiToken.expires_at > now)).group_by(ApiToken.tenant_id))
    return {tenant_id: count for tenant_id, count in rows if tenant_id is not None}
