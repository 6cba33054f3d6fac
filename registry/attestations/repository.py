"""The queries of the attestation upkeep that re-signs and backfills. (The active set reads the
attestations it ships with its own query, in registry/active_set/repository.py.)"""

from __future__ import annotations

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from registry.tables import Attestation, AuditEvent, Pool, PoolAlias, PoolRetirement, Promotion


def of_version(session: Session, version_id: int) -> list[Attestation]:
    return list(session.scalars(select(Attestation).where(Attestation.version_id == version_id)
                                .order_by(Attestation.id)))


def newest_of(session: Session, pool_id: int, version_id: int) -> Attestation | None:
    return session.scalar(select(Attestation).where(
        Attestation.pool_id == pool_id, Attestation.version_id == version_id)
        .order_by(Attestation.id.desc()).limit(1))


def is_attested(session: Session, pool_id: int, version_id: int) -> bool:
    return bool(session.scalar(select(Attestation.id).where(
        Attestation.pool_id == pool_id, Attestation.version_id == version_id).limit(1)))


def newest_activated_promotion(session: Session, pool_id: int, version_id: int) -> Promotion | None:
    return session.scalar(select(Promotion).where(
        Promotion.pool_id == pool_id, Promotion.version_id == version_id,
        Promotion.activated_at.is_not(None)).order_by(Promotion.id.desc()).limit(1))


def activation_event_hash(session: Session, subject: str, promotion_id: int) -> str | None:
    """The hash of the newest audit event that activated this promotion on `subject`."""
    return session.scalar(select(AuditEvent.hash).where(
        AuditEvent.action == "promotion.activated", AuditEvent.subject == subject,
        AuditEvent.after["id"].as_integer() == promotion_id)
        .order_by(AuditEvent.id.desc()).limit(1))


def active_pairs(session: Session) -> list[tuple[int, int]]:
    """(pool id, version id) of every version a pool serves or is still retiring, sorted."""
    aliased = select(PoolAlias.pool_id, PoolAlias.version_id)
    retiring = select(PoolRetirement.pool_id, PoolRetirement.version_id)
    return sorted(set(session.execute(aliased).all()) | set(session.execute(retiring).all()))


def lock_upkeep(session: Session, key: int) -> None:
    """PostgreSQL's advisory lock `key`, held until the transaction ends."""
    session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})


def active_set_signers(session: Session) -> list[tuple[int, str | None]]:
    """(pool id, id of the key its signed active set names) of every pool with one. Read from a
    column anyone with the database can write: whatever is there is never trusted, nor crashes."""
    signers = []
    for pool_id, signed in session.execute(select(Pool.id, Pool.signed_active_set)):
        signatures = signed.get("signatures") if isinstance(signed, dict) else None
        first = signatures[0] if isinstance(signatures, list) and signatures else None
        if isinstance(first, dict):
            signers.append((pool_id, first.get("keyid") if isinstance(first.get("keyid"), str) else None))
    return signers
