"""Times are stored in UTC; SQLite hands them back naive."""

from __future__ import annotations

from datetime import UTC, datetime


def aware(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment
