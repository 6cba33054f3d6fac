"""Rows the code knows exist: a foreign key's target, or a row this transaction read or locked
before. `session.get` answers None only when that knowledge is wrong (a broken reference, a row
deleted meanwhile); `existing` says so by name instead of failing later on None."""

from __future__ import annotations

from typing import Any, TypeVar

from sqlalchemy.orm import Session

from registry.errors import NotFound

T = TypeVar("T")


def existing(session: Session, table: type[T], key: Any, **get_options: Any) -> T:
    """session.get(table, key, ...), or NotFound when there is no such row."""
    row = session.get(table, key, **get_options)
    if row is None:
        raise NotFound(f"{table.__name__} {key} does not exist", code="row_missing",
                       hint="A row this one refers to is gone; it may have been deleted meanwhile.")
    return row
