"""The `?limit=&cursor=` query parameters of every list endpoint, defined once."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, Query

from registry.pagination import MAX_CURSOR_CHARS, MAX_LIMIT, PageRequest


def paging(*, default_limit: int = 50, prefix: str = "") -> Any:
    """The parameters as one dependency that gives a PageRequest. `prefix` names a second list
    inside one answer (`?examples_limit=`)."""
    def page_request(
        limit: int = Query(default_limit, ge=1, le=MAX_LIMIT, alias=f"{prefix}limit"),
        cursor: str | None = Query(None, max_length=MAX_CURSOR_CHARS, alias=f"{prefix}cursor"),
    ) -> PageRequest:
        return PageRequest(limit=limit, cursor=cursor)

    return Depends(page_request)


Paging = paging()
