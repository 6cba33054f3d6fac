"""Queries on the routers' traffic windows."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import CursorResult, delete, func, select
from sqlalchemy.orm import Session

from registry.tables import TrafficWindow


def report_seen(session: Session, pool_id: int, router_id: str, report_id: str) -> bool:
    return session.scalar(select(TrafficWindow.id).where(
        TrafficWindow.pool_id == pool_id, TrafficWindow.router_id == router_id,
        TrafficWindow.report_id == report_id).limit(1)) is not None


def database_now(session: Session) -> datetime:
    """The database's clock as this statement runs (not its transaction's start), the one the
    windows are stamped with, so that registries and housekeepers on other hosts agree. SQLite
    (one host, the embedded default) has no such clock: this host's is the one."""
    if session.get_bind().dialect.name != "postgresql":
        return datetime.now(UTC)
    return session.execute(select(func.clock_timestamp())).scalar_one()


def windows_since(session: Session, pool_id: int, served_names: list[str], since: datetime) -> list[TrafficWindow]:
    """The windows of these served names stored at or after `since`, oldest first."""
    return list(session.scalars(select(TrafficWindow).where(
        TrafficWindow.pool_id == pool_id, TrafficWindow.served_name.in_(served_names),
        TrafficWindow.at >= since).order_by(TrafficWindow.id)))


def pool_windows_since(session: Session, pool_id: int, since: datetime) -> list[TrafficWindow]:
    """Every window of the pool stored at or after `since`, oldest first."""
    return list(session.scalars(select(TrafficWindow).where(
        TrafficWindow.pool_id == pool_id, TrafficWindow.at >= since).order_by(TrafficWindow.id)))


def prune_windows(session: Session, before: datetime) -> int:
    # A DML statement's result is a CursorResult; Session.execute is typed as Result.
    result = cast("CursorResult[Any]", session.execute(delete(TrafficWindow).where(TrafficWindow.at < before)))
    return result.rowcount


def all_windows(session: Session) -> list[TrafficWindow]:
    return list(session.scalars(select(TrafficWindow).order_by(TrafficWindow.id)))
