"""The pools' queries."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from registry.pagination import fetch_page
from registry.tables import Pool


def pool_exists(session: Session, name: str) -> bool:
    return session.scalar(select(Pool.id).where(Pool.name == name)) is not None


def page_of_pools(session: Session, *, limit: int,
                  cursor: str | None) -> tuple[list[Pool], str | None]:
    return fetch_page(session, select(Pool), Pool.id, limit=limit, cursor=cursor)
