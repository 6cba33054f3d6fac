"""Queries on attestations that the active set needs (kept apart from signing, which reads
promotions and evaluations: the active set must not depend on those)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from registry.tables import Attestation


def current(session: Session, pool_id: int, version_ids: list[int]) -> dict[int, dict[str, Any]]:
    """version id -> the envelope of its newest attestation in the pool."""
    newest = (select(func.max(Attestation.id)).where(Attestation.pool_id == pool_id,
                                                     Attestation.version_id.in_(version_ids))
              .group_by(Attestation.version_id))
    rows = session.execute(select(Attestation.version_id, Attestation.envelope)
                           .where(Attestation.id.in_(newest))).all()
    return {version_id: envelope for version_id, envelope in rows}


def of_version(session: Session, version_id: int) -> list[Attestation]:
    return list(session.scalars(select(Attestation).where(Attestation.version_id == version_id)
                                .order_by(Attestation.id)))
