"""The three ways work happens once here, each a transaction-level advisory lock, so each works
through PgBouncer in transaction mode (an open transaction keeps its server connection):

- `Leadership`: one process leads, for as long as it lives, holding the lock in a transaction
  kept open on a connection of its own. The housekeeper's loops run on the leader only.
- `start_up_turn`: the registry's start-up work, one replica after the other; each finds what
  the first did and does nothing more.
- `sending`: one sender of a webhook delivery at a time, whatever the broker delivered twice.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sqlalchemy.orm import Session

from registry.db import dedicated_engine, get_engine, plain_transaction
from registry.leadership import repository

log = logging.getLogger(__name__)


class Leadership:
    """Whether this process leads the processes that run it with the same key.

    A follower tries to take the lock every `check_s`; the leader sends a round trip in its
    open transaction as often, and steps down when it fails. A leader killed, or whose connection
    is cut, ends its transaction with its connection (Postgres, or PgBouncer, closes the server
    side once the client is gone), and a follower leads within `check_s` of that."""

    def __init__(self, name: str, key: int, *, check_s: float,
                 on_change: Callable[[bool], None] | None = None) -> None:
        self.name, self.key, self.check_s, self.on_change = name, key, check_s, on_change
        self._leading = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def leading(self) -> bool:
        return self._leading.is_set()

    def wait_to_lead(self) -> None:
        """Block until this process leads (at once while it does)."""
        self._leading.wait()

    def start(self) -> None:
        if get_engine().dialect.name != "postgresql":  # SQLite: one machine, one housekeeper
            self._set(True)
            return
        self._thread = threading.Thread(target=self._run, name=f"leadership-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.check_s + 5)

    def _run(self) -> None:
        engine = dedicated_engine(f"loraplane-leadership-{self.name}")
        while not self._stop.is_set():
            try:
                # Returned to its pool at the end of the block, the connection's transaction rolls
                # back: a follower's try, or a leader's lead at a clean stop, ends there.
                with engine.connect() as connection:
                    if repository.try_lead(connection, self.key):
                        self._lead(connection)
            except Exception as error:  # the database, PgBouncer or the network is away
                if self.leading:
                    log.warning("%s: lost the lead (%s: %s); trying to take it again every %.1f s",
                                self.name, type(error).__name__, error, self.check_s)
            self._set(False)
            self._stop.wait(self.check_s)
        engine.dispose()

    def _lead(self, connection) -> None:
        log.info("%s: this process leads now", self.name)
        self._set(True)
        while not self._stop.wait(self.check_s):
            repository.still_leading(connection)

    def _set(self, leading: bool) -> None:
        if leading == self.leading:
            return
        if leading:
            self._leading.set()
        else:
            self._leading.clear()
        if self.on_change is not None:
            self.on_change(leading)


def start_up_turn(session: Session) -> None:
    """Wait for the registry replicas starting before this one to finish their start-up step
    (publishing keys, adopting the key ledger, re-signing), each in its transaction: this one
    then finds the step done. Waits rather than skips: a replica must not serve before it is."""
    repository.wait_for_lock(session, repository.START_UP)


@contextmanager
def sending(delivery_id: int) -> Iterator[bool]:
    """True while this process alone sends the delivery: held in a transaction of its own that
    stays open for the send (bounded by LORAPLANE_WEBHOOK_TIMEOUT_S). A second copy of the task,
    redelivered by the broker or sent again by the sweep, gets False while the first sends, and
    ends; one that runs after finds the delivery delivered (or due for its retry). SQLite (one
    machine) holds no transaction open for it: there a transaction holds the database's write lock."""
    if get_engine().dialect.name != "postgresql":
        yield True
        return
    with plain_transaction() as session:
        yield repository.try_lock(session, repository.WEBHOOK_DELIVERY, delivery_id)
