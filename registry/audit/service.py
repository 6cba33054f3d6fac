"""Record audit events. Events wait in the session and are sealed into the hash chain as the
transaction commits, under a lock taken only then and held until the commit ends: the chain stays
in id order across concurrent writers, and the lock is always the last one a transaction takes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import event, select, text
from sqlalchemy.orm import Session

from registry.audit.chain import GENESIS, as_json, event_hash
from registry.tables import AuditEvent

PENDING = "loraplane.audit.pending"
# Any constant works; it names the one lock that orders the chain.
CHAIN_LOCK = 7_260_001


def record(
    session: Session,
    *,
    actor: str,
    action: str,
    subject: str,
    tenant_id: int | None = None,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> None:
    session.info.setdefault(PENDING, []).append(dict(
        at=datetime.now(UTC), actor=actor, action=action, subject=subject, tenant_id=tenant_id,
        before=as_json(before), after=as_json(after)))


def pending(session: Session) -> list[dict[str, Any]]:
    """Events recorded in this transaction and not yet sealed (webhooks read them)."""
    return list(session.info.get(PENDING, ()))


@event.listens_for(Session, "before_commit")
def _seal(session: Session) -> None:
    if session.in_nested_transaction():  # a savepoint: seal with the real commit
        return
    events = session.info.pop(PENDING, None)
    if not events:
        return
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": CHAIN_LOCK})
    # (SQLite: BEGIN IMMEDIATE already holds the database's single write lock.)
    head = session.scalar(select(AuditEvent.hash).order_by(AuditEvent.id.desc()).limit(1))
    prev_hash = head or GENESIS
    for fields in events:
        digest = event_hash(prev_hash, **fields)
        session.add(AuditEvent(**fields, prev_hash=prev_hash, hash=digest))
        prev_hash = digest


@event.listens_for(Session, "after_rollback")
def _discard(session: Session) -> None:
    if not session.in_nested_transaction():
        session.info.pop(PENDING, None)
