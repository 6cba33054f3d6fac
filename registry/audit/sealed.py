"""Single events of the chain read as evidence: an event counts only while its own keyed hash
still matches it, so a row that someone with database access wrote or edited without the
registry host's audit key (registry/keys.py) is never believed. The whole chain's check, with its
order and anchor, is verify.py's."""

from __future__ import annotations

import hmac
from typing import Any

from sqlalchemy.orm import Session

from registry.audit import repository
from registry.audit.chain import HMAC_SHA256, event_hash
from registry.keys import Purpose, keyed
from registry.secret_checkpoints import service as secret_checkpoints
from registry.tables import AuditEvent


def sealed_events(session: Session, subject: str, *actions: str) -> list[AuditEvent]:
    """Events about `subject` with one of `actions` whose keyed hash holds, oldest first."""
    return [row for row in repository.events_about(session, subject, actions) if intact(session, row)]


def newest_sealed(session: Session, action: str, subject_prefix: str) -> dict[str, AuditEvent]:
    """subject -> the newest event with `action` about it, when that event's keyed hash holds.
    The newest only: an older sealed event put back in the way says nothing about now."""
    return {subject: row for subject, row in
            repository.newest_events(session, action, subject_prefix).items() if intact(session, row)}


def intact(session: Session, row: AuditEvent) -> bool:
    """Its keyed hash holds, under the current secret, or under a rotated-out one up to that
    secret's checkpoint (rotations.py)."""
    if row.hash_scheme != HMAC_SHA256:  # unkeyed: anyone could have written it
        return False
    return secret_checkpoints.event_believed(session, row.id, keyed_with(row))


def keyed_with(row: AuditEvent) -> str | None:
    """The fingerprint of the secret that keyed the event's hash, or None."""
    for secret, key in keyed(Purpose.AUDIT_CHAIN):
        if hmac.compare_digest(hash_under(row, key), row.hash):
            return secret
    return None


def hash_under(row: AuditEvent, key: bytes | None) -> str:
    return event_hash(row.prev_hash, at=row.at, actor=row.actor, action=row.action,
                      subject=row.subject, tenant_id=row.tenant_id, before=row.before,
                      after=row.after, key=key)


def recorded(row: AuditEvent, field: str) -> Any:
    return (row.after or {}).get(field)
