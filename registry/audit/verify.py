"""Walk the audit chain and report every row that does not fit it."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from registry.audit.chain import GENESIS, event_hash
from registry.tables import AuditEvent

BATCH = 2000


@dataclass
class Problem:
    id: int
    kind: str  # altered | removed_before
    detail: str


@dataclass
class ChainReport:
    events: int = 0
    head: str = GENESIS
    problems: list[Problem] = field(default_factory=list)

    @property
    def intact(self) -> bool:
        return not self.problems


def verify_chain(session: Session, *, max_problems: int = 100) -> ChainReport:
    """An altered row no longer matches its own hash. A removed row leaves the next one pointing
    at a hash that is not the row before it. Removing the newest rows leaves no trace inside the
    chain: compare `head` with a copy kept elsewhere (webhook receivers get every hash)."""
    report = ChainReport()
    expected_prev, last_id = GENESIS, 0
    while True:
        rows = session.scalars(select(AuditEvent).where(AuditEvent.id > last_id)
                               .order_by(AuditEvent.id).limit(BATCH)).all()
        if not rows:
            return report
        for row in rows:
            report.events += 1
            if row.prev_hash != expected_prev:
                report.problems.append(Problem(row.id, "removed_before", (
                    f"event {row.id} follows a hash that is not event {last_id or 'genesis'}'s: "
                    "an event before it was removed or reordered")))
            recomputed = event_hash(row.prev_hash, at=row.at, actor=row.actor, action=row.action,
                                    subject=row.subject, tenant_id=row.tenant_id,
                                    before=row.before, after=row.after)
            if recomputed != row.hash:
                report.problems.append(Problem(row.id, "altered", (
                    f"event {row.id} ({row.action} {row.subject}) does not match its hash: "
                    "it was edited after it was written")))
            expected_prev, last_id = row.hash, row.id
            report.head = row.hash
            if len(report.problems) >= max_problems:
                return report
        session.expunge_all()
