"""PostgreSQL's advisory locks, transaction-level only: a session-level lock taken through
PgBouncer in transaction mode stays on a server connection that other clients then use. Each
lock here ends with its transaction, or with its connection."""

from __future__ import annotations

from sqlalchemy import Connection, text
from sqlalchemy.orm import Session

# Any constants work, apart from the other locks' (7_260_0xx): two int4 halves name a lock
# (a kind and an id), so a delivery id never collides with a singleton.
START_UP = 7_260_010          # the registry's start-up work, one replica at a time
HOUSEKEEPING = 7_260_011      # the housekeepers' leader
WEBHOOK_DELIVERY = 7_260_012  # with a delivery id: the one housekeeper sending it


def wait_for_lock(session: Session, key: int) -> None:
    """Take `key` for the rest of the transaction, waiting for whoever holds it."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})


def try_lock(session: Session, kind: int, key: int) -> bool:
    """Take (kind, key) for the rest of the transaction if nobody holds it. SQLite has no such
    locks and one machine: always True there."""
    if session.get_bind().dialect.name != "postgresql":
        return True
    return bool(session.scalar(text("SELECT pg_try_advisory_xact_lock(:kind, :key)"),
                               {"kind": kind, "key": key}))


def try_lead(connection: Connection, key: int) -> bool:
    """On a leadership connection, in its open transaction."""
    return bool(connection.scalar(text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": key}))


def still_leading(connection: Connection) -> None:
    """A round trip in the leader's open transaction; raises when the connection is gone."""
    connection.execute(text("SELECT 1"))
