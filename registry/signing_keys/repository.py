from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from registry.tables import TenantSigningKey


def active_keys(session: Session, tenant_id: int) -> list[TenantSigningKey]:
    query = select(TenantSigningKey).where(TenantSigningKey.tenant_id == tenant_id,
                                           TenantSigningKey.revoked_at.is_(None))
    return list(session.scalars(query.order_by(TenantSigningKey.id)))


def all_keys(session: Session, tenant_id: int) -> list[TenantSigningKey]:
    query = select(TenantSigningKey).where(TenantSigningKey.tenant_id == tenant_id)
    return list(session.scalars(query.order_by(TenantSigningKey.id)))


def count_active(session: Session, tenant_id: int) -> int:
    return session.execute(select(func.count()).select_from(TenantSigningKey).where(
        TenantSigningKey.tenant_id == tenant_id, TenantSigningKey.revoked_at.is_(None))).scalar_one()


def by_name(session: Session, tenant_id: int, name: str) -> TenantSigningKey | None:
    return session.scalar(select(TenantSigningKey).where(TenantSigningKey.tenant_id == tenant_id,
                                                         TenantSigningKey.name == name))
