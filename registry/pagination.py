"""Keyset pagination by id: stable under concurrent inserts, cheap at any depth."""

from __future__ import annotations

from typing import Generic, TypeVar

from pydantic import BaseModel
from sqlalchemy import Select
from sqlalchemy.orm import Session

from registry.errors import Unprocessable

T = TypeVar("T")
MAX_LIMIT = 200


class Page(BaseModel, Generic[T]):
    items: list[T]
    next_cursor: str | None = None


def fetch_page(session: Session, query: Select, id_column, *, limit: int, cursor: str | None):
    """Return (rows, next_cursor) for a query over one entity, ordered by id."""
    if not 1 <= limit <= MAX_LIMIT:
        raise Unprocessable(f"limit must be between 1 and {MAX_LIMIT}", code="invalid_limit")
    if cursor is not None:
        if not cursor.isdigit() or len(cursor) > 18:
            raise Unprocessable(
                "cursor is not valid", code="invalid_cursor", hint="Pass next_cursor as returned."
            )
        query = query.where(id_column > int(cursor))
    rows = list(session.scalars(query.order_by(id_column).limit(limit + 1)))
    if len(rows) > limit:
        return rows[:limit], str(rows[limit - 1].id)
    return rows, None
