"""Record audit events. An event waits in its unit of work's record (registry/pending_work.py)
and is sealed into the hash chain when that unit commits (sealing.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import BaseModel
from sqlalchemy.orm import Session

from registry import pending_work
from registry.audit.chain import as_json

Out = TypeVar("Out", bound=BaseModel)


def record(
    session: Session,
    *,
    actor: str,
    action: str,
    subject: str,
    tenant_id: int | None = None,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The event, as it waits for the commit; its `sealed_hash` is set when the commit seals it
    into the chain (an attestation signed at that commit names it)."""
    fields = dict(at=datetime.now(UTC), actor=actor, action=action, subject=subject,
                  tenant_id=tenant_id, before=as_json(before), after=as_json(after))
    pending_work.of(session).audit_events.append(fields)
    return fields


def record_created(session: Session, out: Out, *, actor: str, action: str, subject: str,
                   tenant_id: int | None = None) -> Out:
    """Record the creation of `out`, with its public form as the event's `after` (less
    `created_at`: the event has its own time), and return it."""
    record(session, actor=actor, action=action, subject=subject, tenant_id=tenant_id,
           after=out.model_dump(mode="json", exclude={"created_at"}))
    return out


def pending(session: Session) -> list[dict[str, Any]]:
    """Events recorded in this transaction and not yet sealed (webhooks read them)."""
    return list(pending_work.of(session).audit_events)
