"""Queries behind promotions and their gates."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from registry.pagination import fetch_page
from registry.promotions.rules import ACTIVE, AWAITING
from registry.tables import Adapter, Promotion, Tenant


def promotion_for_update(session: Session, promotion_id: int) -> Promotion | None:
    """Locked, and read afresh: another decision may have committed since this session read it."""
    return session.scalar(select(Promotion).where(Promotion.id == promotion_id)
                          .with_for_update().execution_options(populate_existing=True))


def active_promotion_for_update(session: Session, pool_id: int, adapter_id: int, alias: str,
                                *, version_id: int | None = None) -> Promotion | None:
    """The promotion the alias points at now (with `version_id`: only if it is that version's)."""
    query = select(Promotion).where(
        Promotion.pool_id == pool_id, Promotion.adapter_id == adapter_id,
        Promotion.alias == alias, Promotion.state == ACTIVE)
    if version_id is not None:
        query = query.where(Promotion.version_id == version_id)
    return session.scalar(query.with_for_update())


def active_promotion(session: Session, pool_id: int, adapter_id: int, alias: str) -> Promotion | None:
    """The promotion the alias points at now, read without a lock."""
    return session.scalar(select(Promotion).where(
        Promotion.pool_id == pool_id, Promotion.adapter_id == adapter_id,
        Promotion.alias == alias, Promotion.state == ACTIVE))


def promotion_page(session: Session, *, tenant: str | None, pool_id: int | None, state: str | None,
                   limit: int, cursor: str | None) -> tuple[list[Promotion], str | None]:
    query = select(Promotion)
    if tenant is not None:
        query = query.join(Adapter, Adapter.id == Promotion.adapter_id).join(
            Tenant, Tenant.id == Adapter.tenant_id).where(Tenant.name == tenant)
    if pool_id is not None:
        query = query.where(Promotion.pool_id == pool_id)
    if state is not None:
        query = query.where(Promotion.state == state)
    return fetch_page(session, query, Promotion.id, limit=limit, cursor=cursor)


def awaiting_request(session: Session, pool_id: int, adapter_id: int, alias: str) -> Promotion | None:
    return session.scalar(select(Promotion).where(
        Promotion.pool_id == pool_id, Promotion.adapter_id == adapter_id, Promotion.alias == alias,
        Promotion.state == AWAITING))


def analysed_canaries(session: Session) -> list[Promotion]:
    """Canaries under way whose analysis is sealed."""
    return list(session.scalars(select(Promotion).where(
        Promotion.analysis_state.is_not(None), Promotion.analysis_seal.is_not(None),
        Promotion.ended_at.is_(None))))


def unsealed_canaries(session: Session) -> list[Promotion]:
    """Canaries under way whose analysis has no seal (started before analyses were sealed)."""
    return list(session.scalars(select(Promotion).where(
        Promotion.analysis_state.is_not(None), Promotion.analysis_seal.is_(None), Promotion.ended_at.is_(None))))
