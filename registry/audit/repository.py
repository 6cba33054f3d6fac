"""The audit log's queries: the chain's lock and tail for sealing, its rows for verifying, and a
filtered page for reading."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Row, func, select, text
from sqlalchemy.orm import Session

from registry.pagination import fetch_page
from registry.tables import AuditEvent, Tenant


def lock_chain(session: Session, key: int) -> None:
    """PostgreSQL's advisory lock `key`, held until the transaction ends."""
    session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})


def last_event(session: Session) -> Row | None:
    """(id, hash) of the newest event, None while the chain is empty."""
    return session.execute(select(AuditEvent.id, AuditEvent.hash)
                           .order_by(AuditEvent.id.desc()).limit(1)).first()


def count_between(session: Session, low: int, high: int) -> int:
    """How many events have an id above `low` and up to `high`."""
    return session.execute(select(func.count()).select_from(AuditEvent)
                           .where(AuditEvent.id > low, AuditEvent.id <= high)).scalar_one()


def hash_of(session: Session, event_id: int) -> str | None:
    return session.scalar(select(AuditEvent.hash).where(AuditEvent.id == event_id))


def events_after(session: Session, last_id: int, limit: int) -> list[AuditEvent]:
    """The next `limit` events after `last_id`, in chain order."""
    return list(session.scalars(select(AuditEvent).where(AuditEvent.id > last_id)
                                .order_by(AuditEvent.id).limit(limit)))


def page_of_events(session: Session, *, tenant: str | None, action: str | None, actor: str | None,
                   subject: str | None, since: datetime | None, until: datetime | None,
                   limit: int, cursor: str | None) -> tuple[list[AuditEvent], str | None]:
    """Events of one tenant (all when None) with this action, an actor containing `actor` and a
    subject starting with `subject`, at or after `since` and before `until`."""
    query = select(AuditEvent)
    if tenant is not None:
        tenant_id = select(Tenant.id).where(Tenant.name == tenant).scalar_subquery()
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
    return fetch_page(session, query, AuditEvent.id, limit=limit, cursor=cursor)


def events_about(session: Session, subject: str, actions: tuple[str, ...]) -> list[AuditEvent]:
    """Every event with one of `actions` about exactly `subject`, oldest first."""
    return list(session.scalars(select(AuditEvent).where(
        AuditEvent.subject == subject, AuditEvent.action.in_(actions)).order_by(AuditEvent.id)))


def newest_events(session: Session, action: str, subject_prefix: str) -> dict[str, AuditEvent]:
    """subject -> the newest event with `action` about each subject starting with the prefix."""
    newest = (select(func.max(AuditEvent.id)).where(AuditEvent.action == action,
                                                     AuditEvent.subject.startswith(subject_prefix, autoescape=True))
              .group_by(AuditEvent.subject))
    return {row.subject: row for row in session.scalars(select(AuditEvent).where(AuditEvent.id.in_(newest)))}
