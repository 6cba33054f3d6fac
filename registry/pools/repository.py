"""The pools' queries."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from registry.pagination import fetch_page
from registry.tables import Pool


def pool_exists(session: Session, name: str) -> bool:
    return session.scalar(select(Pool.id).where(Pool.name == name)) is not None


def find_pool(session: Session, name: str) -> Pool | None:
    return session.scalar(select(Pool).where(Pool.name == name))


def lock_pool(session: Session, name: str) -> Pool | None:
    """The pool's row under FOR UPDATE: every change to what a pool serves is serialized on it."""
    return session.scalar(select(Pool).where(Pool.name == name).with_for_update())


def page_of_pools(session: Session, *, limit: int,
                  cursor: str | None) -> tuple[list[Pool], str | None]:
    return fetch_page(session, select(Pool), Pool.id, limit=limit, cursor=cursor)
