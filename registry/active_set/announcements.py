"""Tell every registry process about a change once it commits: a new generation, or a revoked
token. Postgres NOTIFY is transactional and reaches the other processes; this process learns at
once from its own after-commit hook (and, on SQLite, the others by polling)."""

from __future__ import annotations

import json

from sqlalchemy.orm import Session

from registry.active_set import repository
from registry.active_set.watch import CHANNEL, WATCH
from registry.db import after_commit


def announce(session: Session, message: dict) -> None:
    if session.get_bind().dialect.name == "postgresql":
        repository.notify(session, CHANNEL, json.dumps(message))
    after_commit(session, lambda: WATCH.publish_local(message))
