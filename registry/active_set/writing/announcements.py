"""Tell every registry process about a change once it commits: a pool's new generation, or a
revoked token. The unit of work sends them with its commit (registry/unit_of_work.py): Postgres
NOTIFY, which is transactional and reaches the other processes, and this process's own long-polls
at once after the commit (on SQLite, the other processes learn by polling)."""

from __future__ import annotations

import json

from sqlalchemy.orm import Session

from registry import pending_work
from registry.active_set import repository

CHANNEL = "loraplane_events"  # the Postgres channel they go out on; watch.py listens to it


def generation_bumped(session: Session, pool: str, generation: int) -> None:
    pending_work.of(session).announcements.append(
        {"kind": "generation", "pool": pool, "generation": generation})


def token_revoked(session: Session) -> None:
    """Every process drops the tokens it has cached."""
    pending_work.of(session).announcements.append({"kind": "token_revoked"})


def notify_other_processes(session: Session, messages: list[dict]) -> None:
    """Postgres NOTIFY, sent by the database when (and only if) the transaction commits."""
    if messages and session.get_bind().dialect.name == "postgresql":
        for message in messages:
            repository.notify(session, CHANNEL, json.dumps(message))
