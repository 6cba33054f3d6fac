"""Keyset pagination by id: stable under concurrent inserts, cheap at any depth."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from pydantic import BaseModel
from sqlalchemy import Select
from sqlalchemy.orm import Session

from registry.errors import Unprocessable

T = TypeVar("T")
MAX_LIMIT = 200
MAX_CURSOR_CHARS = 18  # an id below 10**18: the cursor is the last id of the page before


class Page(BaseModel, Generic[T]):
    items: list[T]
    next_cursor: str | None = None

    @classmethod
    def of(cls, listed: tuple[list, str | None]) -> Page:
        """The page of a service's (items, next_cursor)."""
        items, next_cursor = listed
        return cls(items=items, next_cursor=next_cursor)


@dataclass(frozen=True)
class PageRequest:
    """What a list endpoint was asked for: at most `limit` items after `cursor` (the query
    parameters are in page_query.py, which keeps FastAPI out of the services)."""
    limit: int
    cursor: str | None


def fetch_page(session: Session, query: Select, id_column, *, limit: int, cursor: str | None):
    """Return (rows, next_cursor) for a query over one entity, ordered by id."""
    if not 1 <= limit <= MAX_LIMIT:
        raise Unprocessable(f"limit must be between 1 and {MAX_LIMIT}", code="invalid_limit")
    if cursor is not None:
        if not cursor.isdigit() or len(cursor) > MAX_CURSOR_CHARS:
            raise Unprocessable(
                "cursor is not valid", code="invalid_cursor", hint="Pass next_cursor as returned."
            )
        query = query.where(id_column > int(cursor))
    rows = list(session.scalars(query.order_by(id_column).limit(limit + 1)))
    if len(rows) > limit:
        return rows[:limit], str(rows[limit - 1].id)
    return rows, None
