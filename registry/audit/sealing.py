"""Seal a transaction's audit events into the hash chain, as its unit of work commits (step 1 of
`UnitOfWork.commit`, registry/unit_of_work.py).

The chain's lock is taken only here and held until the commit ends: the chain stays in id order
across concurrent writers, and that lock is always the last one a transaction takes. Once the
commit is through, the new head goes to the file outside the database (`write_anchor`, see
anchor.py)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from sqlalchemy.orm import Session

from registry.audit import anchor, repository
from registry.audit.chain import GENESIS, HMAC_SHA256, event_hash
from registry.keys import Purpose, key_for
from registry.tables import AuditEvent

log = logging.getLogger(__name__)
# Any constant works; it names the one lock that orders the chain.
CHAIN_LOCK = 7_260_001


@dataclass(frozen=True)
class Sealed:
    """The chain's head once the transaction's events are in it."""
    signed_head: dict[str, Any] | None = None  # None while the chain is empty
    to_anchor: tuple[Path, anchor.Head] | None = None  # written once committed, if the file may move on


def seal(session: Session, events: list[dict[str, Any]]) -> Sealed:
    """Append `events` to the chain (each gets its `sealed_hash`) and return the new head."""
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
    now = datetime.now(UTC).isoformat()
    if rows:
        head = anchor.Head(last_id=rows[-1].id, last_hash=rows[-1].hash,
                           count=count.value + len(rows), at=now)
    elif last is not None:
        head = anchor.Head(last_id=last.id, last_hash=last.hash, count=count.value, at=now)
    else:
        return Sealed()
    return Sealed(signed_head=head.signed(),
                  to_anchor=(path, head) if rows and count.anchored else None)


def write_anchor(sealed: Sealed) -> None:
    """Move the head on file to the committed chain's head (step 5)."""
    if sealed.to_anchor is None:
        return
    path, head = sealed.to_anchor
    try:
        anchor.write(path, head)
    except OSError:  # the events are committed; the next commit moves the head on
        log.exception("could not write the audit head to %s", path)


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
