"""Store what a router saw since its last report. A report id already stored is not stored
again: a router whose answer was lost sends the same report once more."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from registry.tables import TrafficWindow
from registry.traffic_windows import repository, seals
from registry.traffic_windows.schemas import WindowDelta

log = logging.getLogger(__name__)


def record(session: Session, pool_id: int, router_id: str, report_id: str,
           deltas: list[WindowDelta]) -> bool:
    """False when the report was stored before."""
    if not deltas or repository.report_seen(session, pool_id, router_id, report_id):
        return False
    at = repository.database_now(session)
    windows = [TrafficWindow(pool_id=pool_id, router_id=router_id, report_id=report_id, at=at, **delta.model_dump())
               for delta in deltas]
    for window in windows:
        window.seal = seals.seal(window)
    try:
        with session.begin_nested():  # the same report, racing through another registry process
            session.add_all(windows)
    except IntegrityError:
        return False
    return True


def sealed_since(session: Session, pool_id: int, served_names: list[str],
                 since: datetime) -> tuple[list[TrafficWindow], int]:
    """The windows of these names stored since `since` whose seal holds, each once, and how many
    did not count: those were written to the database by someone other than a registry."""
    return only_sealed(repository.windows_since(session, pool_id, served_names, since), pool_id)


def only_sealed(windows: list[TrafficWindow], pool_id: int) -> tuple[list[TrafficWindow], int]:
    sealed, seen = [], set()
    for window in windows:  # a sealed window copied into another row counts once
        key = (window.router_id, window.report_id, window.served_name, window.alias)
        if seals.holds(window) and key not in seen:
            seen.add(key)
            sealed.append(window)
    if len(sealed) < len(windows):
        log.warning("%d traffic windows of pool %d have no valid seal and are not counted: they were "
                    "not stored by a registry (loraplane audit verify, and check who writes to the "
                    "database)", len(windows) - len(sealed), pool_id)
    return sealed, len(windows) - len(sealed)


def reseal(session: Session) -> int:
    """After LORAPLANE_SECRET_KEY is rotated: the windows kept for canary analysis that were
    sealed under the previous secret, sealed under the new one. Returns how many."""
    resealed = 0
    for window in repository.all_windows(session):
        if seals.sealed_before(window):
            window.seal = seals.seal(window)
            resealed += 1
    session.flush()
    return resealed


def prune(session: Session, *, keep_s: float) -> int:
    """Forget windows older than `keep_s`."""
    return repository.prune_windows(session, datetime.fromtimestamp(datetime.now(UTC).timestamp() - keep_s, UTC))
