"""Queries on the routers' traffic windows."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from registry.tables import TrafficWindow


def report_seen(session: Session, pool_id: int, router_id: str, report_id: str) -> bool:
    return session.scalar(select(TrafficWindow.id).where(
        TrafficWindow.pool_id == pool_id, TrafficWindow.router_id == router_id,
        TrafficWindow.report_id == report_id).limit(1)) is not None


def windows_after(session: Session, pool_id: int, served_names: list[str], after_id: int) -> list[TrafficWindow]:
    """The windows stored after the one with id `after_id`."""
    return list(session.scalars(select(TrafficWindow).where(
        TrafficWindow.pool_id == pool_id, TrafficWindow.served_name.in_(served_names),
        TrafficWindow.id > after_id).order_by(TrafficWindow.id)))


def last_window_id(session: Session) -> int:
    return session.scalar(select(func.max(TrafficWindow.id))) or 0


def prune_windows(session: Session, before: datetime) -> int:
    return session.execute(delete(TrafficWindow).where(TrafficWindow.at < before)).rowcount
