"""Where each rotated-out secret stops being believed. When a registry first starts with a new
LORAPLANE_SECRET_KEY, whose predecessor is in LORAPLANE_PREVIOUS_SECRET_KEYS, it records a
checkpoint (sealed with the new secret): the last audit event and the last token made before.
A previous secret then verifies the events and token hashes up to its checkpoint, and nothing
after: whoever still holds it cannot add an event or a token that is believed.

A previous secret with no checkpoint yet (no registry has started with the new secret) verifies
everything, as it did before the rotation."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from registry import keys
from registry.keys import Purpose
from registry.secret_checkpoints import repository
from registry.tables import SecretCheckpoint

CACHE_S = 30.0  # another registry's checkpoint is seen within this long


@dataclass(frozen=True)
class Checkpoint:
    previous: str  # the rotated-out secret's fingerprint
    through_event: int
    through_token: int


_cached: tuple[float, str, dict[str, Checkpoint]] | None = None
_lock = threading.Lock()


def checkpoints(session: Session, *, fresh: bool = False) -> dict[str, Checkpoint]:
    """By previous fingerprint: those sealed with the current secret, cached for CACHE_S (or
    read again: `fresh`)."""
    global _cached
    current = keys.current_fingerprint()
    cached = _cached
    if not fresh and cached is not None and cached[1] == current and time.monotonic() < cached[0]:
        return cached[2]
    found: dict[str, Checkpoint] = {}
    for row in repository.all_checkpoints(session):
        checkpoint = Checkpoint(row.previous, row.through_event, row.through_token)
        if keys.verifies_current(Purpose.SECRET_CHECKPOINTS, _message(checkpoint, row.current), row.seal):
            found.setdefault(row.previous, checkpoint)
    with _lock:
        _cached = (time.monotonic() + CACHE_S, current, found)
    return found


def record(session: Session, previous: str) -> Checkpoint:
    """The checkpoint of `previous`, rotated out now (under the caller's lock: `lock`)."""
    global _cached
    checkpoint = Checkpoint(previous, repository.last_event_id(session), repository.last_token_id(session))
    current = keys.current_fingerprint()
    session.add(SecretCheckpoint(previous=previous, current=current, through_event=checkpoint.through_event,
                                 through_token=checkpoint.through_token, at=datetime.now(UTC),
                                 seal=keys.sign(Purpose.SECRET_CHECKPOINTS, _message(checkpoint, current))))
    session.flush()
    _cached = None
    return checkpoint


def forget_cache() -> None:
    """For a process that moves to another database (tests)."""
    global _cached
    _cached = None


def lock(session: Session) -> None:
    repository.lock(session)


def event_believed(session: Session, event_id: int, secret: str | None) -> bool:
    """Whether an event keyed with `secret` (a fingerprint; None: no secret matched) counts."""
    if secret is None:
        return False
    if secret == keys.current_fingerprint():
        return True
    checkpoint = checkpoints(session).get(secret)
    return checkpoint is None or event_id <= checkpoint.through_event


def token_believed(session: Session, token_id: int, secret: str) -> bool:
    """Whether a token hash keyed with the previous `secret` counts: a token made before its rotation."""
    checkpoint = checkpoints(session).get(secret)
    return checkpoint is None or token_id <= checkpoint.through_token


def _message(checkpoint: Checkpoint, current: str) -> bytes:
    return json.dumps([checkpoint.previous, current, checkpoint.through_event, checkpoint.through_token],
                      separators=(",", ":")).encode()
