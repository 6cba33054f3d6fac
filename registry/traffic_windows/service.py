"""Store what a router saw since its last report. A report id already stored is not stored
again: a router whose answer was lost sends the same report once more."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from registry.tables import TrafficWindow
from registry.traffic_windows import repository
from registry.traffic_windows.schemas import WindowDelta


def record(session: Session, pool_id: int, router_id: str, report_id: str,
           deltas: list[WindowDelta]) -> bool:
    """False when the report was stored before."""
    if not deltas or repository.report_seen(session, pool_id, router_id, report_id):
        return False
    at = repository.database_now(session)
    try:
        with session.begin_nested():  # the same report, racing through another registry process
            session.add_all(TrafficWindow(pool_id=pool_id, router_id=router_id, report_id=report_id,
                                          at=at, **delta.model_dump()) for delta in deltas)
    except IntegrityError:
        return False
    return True


def prune(session: Session, *, keep_s: float) -> int:
    """Forget windows older than `keep_s`."""
    return repository.prune_windows(session, datetime.fromtimestamp(datetime.now(UTC).timestamp() - keep_s, UTC))
