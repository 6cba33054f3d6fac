"""Take routers' traffic reports, which size each adapter's replicas. Where adapters live is
kept current by every change to the active set (change.py)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from registry.active_set.writing.change import follow_nodes
from registry.pool_lookup import pool_by_name
from registry.auth.principal import Principal, Role
from registry.errors import Unprocessable
from registry.traffic_windows import service as traffic_windows
from registry.traffic_windows.schemas import WindowDelta
from registry.placement import repository
from registry.tables import RouterTraffic


def record_traffic(session: Session, principal: Principal, pool_name: str, router_id: str,
                   rates: dict[str, float], *, report_id: str | None = None,
                   windows: Sequence[WindowDelta] = ()) -> None:
    principal.require_instance(pool_name, router_id, Role.ROUTER)
    pool = pool_by_name(session, pool_name)
    if windows:
        if report_id is None:  # TrafficReport refuses this too, with the same words
            raise Unprocessable("windows need a report_id", code="report_id_missing")
        traffic_windows.record(session, pool.id, router_id, report_id, list(windows))
    reported_at = datetime.now(UTC)
    row = repository.router_traffic_for_update(session, pool.id, router_id)
    if row is None:
        try:
            with session.begin_nested():  # a first report racing another from the same router
                session.add(RouterTraffic(pool_id=pool.id, router_id=router_id, rates=rates,
                                          reported_at=reported_at))
        except IntegrityError:
            row = repository.router_traffic_for_update(session, pool.id, router_id)
    if row is not None:
        row.rates, row.reported_at = rates, reported_at
    session.flush()
    follow_nodes(session, pool.id)  # traffic may move a replica
