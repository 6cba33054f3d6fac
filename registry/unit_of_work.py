"""The unit of work: one transaction, and everything its changes call for at commit, run in one
visible order.

Services change rows through the session and write what else must happen into the unit's record
(registry/pending_work.py): audit events, attestations to sign, webhook deliveries, announcements
for the long-polls, evaluations to queue. `commit()` then runs, in this order:

  1. seal the audit chain: the events get their place and hash (audit/sealing.py);
  2. sign attestations: each names its audit event's hash (attestations/issuing.py);
  3. put the chain's signed head into the webhook payloads (webhooks/service.py);
  4. COMMIT, with the announcements' Postgres NOTIFY (active_set/writing/announcements.py);
  5. wake this process's long-polls, queue webhooks and evaluations, write the audit anchor.

Steps 1 to 3 run inside the transaction: what they write commits with the change, or not at all.
Step 5 runs once the commit stands; a step that fails there is logged, and the sweeps (webhooks,
evaluations) or the next commit (the anchor) recover what it missed.

A request's unit is opened by its session dependency (request_session.py, from the app's
`begin_work`); everything else opens one with `transaction()`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy.orm import Session

from registry import pending_work
from registry.active_set.writing import announcements
from registry.attestations import issuing
from registry.audit import sealing
from registry.db import new_session
from registry.task_queue import enqueue_evaluations, enqueue_webhook_deliveries
from registry.webhooks import service as webhooks
from registry.work_scope import opened

log = logging.getLogger(__name__)
Wake = Callable[[dict[str, Any]], None]


class UnfinishedChange(RuntimeError):
    """An active-set change was begun and never finished: its set would go out unsigned."""


class UnitOfWork:
    def __init__(self, session: Session, *, wake: Wake | None = None) -> None:
        """`wake`: how this process's long-polls hear of an announcement at once (the app's)."""
        self.session = session
        self.pending = pending_work.start(session)
        self._wake = wake

    @classmethod
    def begin(cls, *, wake: Wake | None = None) -> UnitOfWork:
        return cls(new_session(), wake=wake)

    def commit(self) -> None:
        session, work = self.session, self.pending
        if work.open_changes:
            raise UnfinishedChange(f"active-set changes of pools {sorted(work.open_changes)} were "
                                   "begun and not finished (call change.finish())")
        sealed = sealing.Sealed()
        if work.audit_events or work.attestations_due or work.webhook_deliveries:
            sealed = sealing.seal(session, work.audit_events)                 # 1
        issuing.sign_due(session, work.attestations_due)                      # 2
        webhooks.add_audit_head(work.webhook_deliveries, sealed.signed_head)  # 3
        announcements.notify_other_processes(session, work.announcements)
        session.commit()                                                      # 4
        self.pending = pending_work.start(session)  # the session may go on with a new transaction
        self._after_commit(work, sealed)                                      # 5

    def rollback(self) -> None:
        self.session.rollback()
        self.pending = pending_work.start(self.session)

    def close(self) -> None:
        self.session.close()

    def _after_commit(self, work: pending_work.PendingWork, sealed: sealing.Sealed) -> None:
        steps: list[tuple[str, Callable[[], None]]] = [
            ("wake long-polls", lambda: self._wake_long_polls(work.announcements)),
            ("queue webhooks", lambda: enqueue_webhook_deliveries([d.id for d in work.webhook_deliveries])),
            ("queue evaluations", lambda: enqueue_evaluations(work.evaluations)),
            ("write the audit anchor", lambda: sealing.write_anchor(sealed)),
        ]
        for name, step in steps:
            try:
                step()
            except Exception:  # the commit stands; polling, the sweeps and the next commit recover
                log.exception("after the commit, %s failed", name)

    def _wake_long_polls(self, messages: list[dict[str, Any]]) -> None:
        if self._wake is not None:
            for message in messages:
                self._wake(message)


@contextmanager
def transaction(*, wake: Wake | None = None) -> Iterator[Session]:
    """One unit of work: committed when the block succeeds, rolled back when it raises."""
    with opened(lambda: UnitOfWork.begin(wake=wake)) as work:
        yield work.session
