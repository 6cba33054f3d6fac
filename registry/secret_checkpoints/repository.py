from __future__ import annotations

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from registry.tables import ApiToken, AuditEvent, SecretCheckpoint

# Any constant works; it keeps two registries starting with a new secret from both recording it.
CHECKPOINT_LOCK = 7_260_004


def all_checkpoints(session: Session) -> list[SecretCheckpoint]:
    return list(session.scalars(select(SecretCheckpoint).order_by(SecretCheckpoint.id)))


def lock(session: Session) -> None:
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": CHECKPOINT_LOCK})


def last_event_id(session: Session) -> int:
    return session.scalar(select(func.coalesce(func.max(AuditEvent.id), 0))) or 0


def last_token_id(session: Session) -> int:
    return session.scalar(select(func.coalesce(func.max(ApiToken.id), 0))) or 0
