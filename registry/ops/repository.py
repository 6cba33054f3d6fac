"""The one query of the probes: does the database answer."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session


def ping(session: Session) -> None:
    session.execute(text("SELECT 1"))
