"""Queries on the routers' traffic windows."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, cast, delete, func, select
from sqlalchemy.orm import Session

from registry.tables import TrafficWindow
from registry.traffic_windows.schemas import WindowSum


def report_seen(session: Session, pool_id: int, router_id: str, report_id: str) -> bool:
    return session.scalar(select(TrafficWindow.id).where(
        TrafficWindow.pool_id == pool_id, TrafficWindow.router_id == router_id,
        TrafficWindow.report_id == report_id).limit(1)) is not None


def database_now(session: Session) -> datetime:
    """The database's clock as this statement runs (not its transaction's start), the one the
    windows are stamped with, so that registries and housekeepers on other hosts agree."""
    return session.scalar(select(func.clock_timestamp()))


def sums_since(session: Session, pool_id: int, served_names: list[str], since: datetime) -> list[WindowSum]:
    """The windows of these served names stored at or after `since`, summed per router, name and
    alias by the database: a step's analysis reads a few rows, however many windows it spans."""
    chosen = (TrafficWindow.pool_id == pool_id, TrafficWindow.served_name.in_(served_names),
              TrafficWindow.at >= since)
    group = (TrafficWindow.router_id, TrafficWindow.served_name, TrafficWindow.alias)
    sums: dict[tuple[str, str, str], WindowSum] = {}
    for row in session.execute(select(
            *group, func.sum(TrafficWindow.requests), func.sum(TrafficWindow.completion_tokens),
            func.sum(TrafficWindow.busy_s), func.sum(TrafficWindow.shadow_compared),
            func.sum(TrafficWindow.shadow_agreed)).where(*chosen).group_by(*group)):
        key = tuple(row[:3])
        sums[key] = WindowSum(*key, *(int(v) for v in row[3:5]), float(row[5]), int(row[6]), int(row[7]))
    errors = func.json_each_text(TrafficWindow.errors).table_valued("key", "value").lateral()
    for *key, kind, count in session.execute(
            select(*group, errors.c.key, func.sum(cast(errors.c.value, BigInteger)))
            .select_from(TrafficWindow).join(errors, errors.c.key.is_not(None))
            .where(*chosen).group_by(*group, errors.c.key)):
        sums[tuple(key)].errors[kind] = int(count)
    for column, attribute in ((TrafficWindow.ttft_buckets, "ttft_buckets"),
                              (TrafficWindow.latency_buckets, "latency_buckets")):
        counts = func.json_array_elements_text(column).table_valued("value", with_ordinality="ordinal").render_derived().lateral()
        for *key, ordinal, count in session.execute(
                select(*group, counts.c.ordinal, func.sum(cast(counts.c.value, BigInteger)))
                .select_from(TrafficWindow).join(counts, counts.c.ordinal.is_not(None))
                .where(*chosen).group_by(*group, counts.c.ordinal)):
            buckets = getattr(sums[tuple(key)], attribute)
            if 1 <= ordinal <= len(buckets):
                buckets[ordinal - 1] = int(count)
    return list(sums.values())


def prune_windows(session: Session, before: datetime) -> int:
    return session.execute(delete(TrafficWindow).where(TrafficWindow.at < before)).rowcount
