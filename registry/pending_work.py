"""What a transaction did that its commit must finish: the record the unit of work
(registry/unit_of_work.py) reads, in order, when it commits.

Services write into it through their own small functions (`audit.record`,
`attestations.issuing.issue_on_commit`, `webhooks.emit`, `announcements.generation_bumped`, ...);
nothing here runs anything. A session opened outside a unit of work has no record, and a service
that tries to write into one is refused at once, so no event can be lost at a commit that would
not seal it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

_KEY = "loraplane.pending_work"


@dataclass
class AttestationDue:
    """The attestation of `promotion` (a Promotion row) to sign once `audit_event` has its place
    in the chain: the statement names that event's hash (attestations/issuing.py)."""
    promotion: Any
    action: str
    audit_event: dict[str, Any]


@dataclass
class PendingWork:
    audit_events: list[dict[str, Any]] = field(default_factory=list)
    attestations_due: list[AttestationDue] = field(default_factory=list)
    # Webhook delivery rows created in this transaction: they get the chain's signed head, and
    # are queued once committed.
    webhook_deliveries: list[Any] = field(default_factory=list)
    # Messages for every registry process (a pool's new generation, a revoked token).
    announcements: list[dict[str, Any]] = field(default_factory=list)
    # (evaluation id, base model name) to queue for the workers once committed.
    evaluations: list[tuple[int, str]] = field(default_factory=list)
    # Active-set changes begun and not finished (registry/active_set/writing/change.py).
    open_changes: set[int] = field(default_factory=set)

    def is_empty(self) -> bool:
        return not (self.audit_events or self.attestations_due or self.webhook_deliveries
                    or self.announcements or self.evaluations or self.open_changes)


class NoUnitOfWork(RuntimeError):
    """A change that needs its commit's work was made in a session no unit of work owns."""


def start(session: Session) -> PendingWork:
    work = PendingWork()
    session.info[_KEY] = work
    return work


def of(session: Session) -> PendingWork:
    """The record of the unit of work that owns `session`."""
    work = session.info.get(_KEY)
    if work is None:
        raise NoUnitOfWork(
            "this change must be committed by a unit of work (its audit events, signatures and "
            "announcements are finished at that commit): open the session with "
            "registry.unit_of_work.transaction(), or take the request's session")
    return work


def discard(session: Session) -> None:
    """Forget what was recorded: the transaction rolled back."""
    if _KEY in session.info:
        session.info[_KEY] = PendingWork()
