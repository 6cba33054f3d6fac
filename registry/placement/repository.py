"""Queries behind placement: the routers' traffic reports."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from registry.settings import get_settings
from registry.tables import RouterTraffic


def router_traffic_for_update(session: Session, pool_id: int, router_id: str) -> RouterTraffic | None:
    return session.scalar(select(RouterTraffic).where(
        RouterTraffic.pool_id == pool_id, RouterTraffic.router_id == router_id).with_for_update())


def recent_traffic(session: Session, pool_id: int) -> dict[str, float]:
    """Requests per second by served name, added up over the routers that reported lately."""
    since = datetime.now(UTC) - timedelta(seconds=get_settings().traffic_stale_after_s)
    rows = session.scalars(select(RouterTraffic).where(RouterTraffic.pool_id == pool_id,
                                                       RouterTraffic.reported_at >= since))
    total: dict[str, float] = {}
    for row in rows:
        for name, rate in row.rates.items():
            total[name] = total.get(name, 0.0) + rate
    return total
