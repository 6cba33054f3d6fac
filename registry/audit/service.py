"""Record audit events. Events wait in the session and are sealed into the hash chain as the
transaction commits, under a lock taken only then and held until the commit ends: the chain stays
in id order across concurrent writers, and the lock is always the last one a transaction takes.
Once the commit is through, the new head goes to the file outside the database (see anchor)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from pydantic import BaseModel
from sqlalchemy import event
from sqlalchemy.orm import Session

import registry.db  # noqa: F401  its before-commit callbacks may record events: they run first
from registry.audit import anchor, repository
from registry.audit.chain import GENESIS, HMAC_SHA256, as_json, event_hash
from registry.keys import Purpose, key_for
from registry.tables import AuditEvent

log = logging.getLogger(__name__)
PENDING = "loraplane.audit.pending"
ON_SEALED = "loraplane.audit.on_sealed"
TO_ANCHOR = "loraplane.audit.to_anchor"
# Any constant works; it names the one lock that orders the chain.
CHAIN_LOCK = 7_260_001
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
    """The event, as it waits in the session; its `sealed_hash` is set when the commit seals it
    into the chain (a `when_sealed` callback can read it)."""
    fields = dict(at=datetime.now(UTC), actor=actor, action=action, subject=subject,
                  tenant_id=tenant_id, before=as_json(before), after=as_json(after))
    session.info.setdefault(PENDING, []).append(fields)
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
    return list(session.info.get(PENDING, ()))


def when_sealed(session: Session, callback: Callable[[dict[str, Any] | None], None]) -> None:
    """Call `callback(head)` as this transaction commits, with the signed head of the chain that
    includes its events (None while the chain is empty). It runs inside the transaction, so what
    it writes commits with the events."""
    session.info.setdefault(ON_SEALED, []).append(callback)


@event.listens_for(Session, "before_commit")
def _seal(session: Session) -> None:
    if session.in_nested_transaction():  # a savepoint: seal with the real commit
        return
    events = session.info.pop(PENDING, None) or []
    callbacks = session.info.pop(ON_SEALED, None) or []
    if not events and not callbacks:
        return
    if session.get_bind().dialect.name == "postgresql":
        repository.lock_chain(session, CHAIN_LOCK)
    # (SQLite: BEGIN IMMEDIATE already holds the database's single write lock.)
    last = repository.last_event(session)
    path = anchor.head_path(session.get_bind().engine.url)
    count = _count_through(session, path, last.id if last else 0)
    key = key_for(Purpose.AUDIT_CHAIN) if events else None
    prev_hash, rows = (last.hash if last else GENESIS), []
    for fields in events:
        digest = event_hash(prev_hash, **fields, key=key)
        rows.append(AuditEvent(**fields, prev_hash=prev_hash, hash=digest, hash_scheme=HMAC_SHA256))
        prev_hash = fields["sealed_hash"] = digest
    session.add_all(rows)
    session.flush()  # the ids, for the head
    head = None
    if rows:
        head = anchor.Head(last_id=rows[-1].id, last_hash=rows[-1].hash, count=count.value + len(rows),
                           at=datetime.now(UTC).isoformat())
    elif last is not None:
        head = anchor.Head(last_id=last.id, last_hash=last.hash, count=count.value,
                           at=datetime.now(UTC).isoformat())
    signed = head.signed() if head else None
    for callback in callbacks:
        callback(signed)
    if rows and count.anchored:
        session.info[TO_ANCHOR] = (path, head)


class _Count(NamedTuple):
    value: int
    anchored: bool  # the head on file is in the chain, so moving it on is safe


def _count_through(session: Session, path: Path, last_id: int) -> _Count:
    """How many events the chain holds through `last_id`. Counted on from the head on file when
    that head is still in the chain; a head that is not (the chain was rewritten, or restored
    from a backup) is left untouched for an operator to see, and the head stops moving."""
    def between(low: int) -> int:
        return repository.count_between(session, low, last_id)

    try:
        on_file = anchor.read(path)
    except anchor.UntrustedHead as problem:
        log.error("the audit head at %s cannot be trusted (%s); it is kept, and no longer updated",
                  path, problem)
        return _Count(between(0), anchored=False)
    if on_file is None:
        return _Count(between(0), anchored=True)
    stored = repository.hash_of(session, on_file.last_id)
    if stored != on_file.last_hash:
        log.error("the audit head at %s (event %s, written %s) is not in the chain: the chain was "
                  "rewritten or restored. The head is kept, and no longer updated; run "
                  "`loraplane audit verify`.", path, on_file.last_id, on_file.at)
        return _Count(between(0), anchored=False)
    return _Count(on_file.count + between(on_file.last_id), anchored=True)


@event.listens_for(Session, "after_commit")
def _anchor(session: Session) -> None:
    if session.in_nested_transaction():
        return
    sealed = session.info.pop(TO_ANCHOR, None)
    if sealed is None:
        return
    path, head = sealed
    try:
        anchor.write(path, head)
    except OSError:  # the events are committed; the next commit moves the head on
        log.exception("could not write the audit head to %s", path)


@event.listens_for(Session, "after_rollback")
def _discard(session: Session) -> None:
    if not session.in_nested_transaction():
        for key in (PENDING, ON_SEALED, TO_ANCHOR):
            session.info.pop(key, None)
