"""Pools by name, refused with one 404 wherever a request names a pool that does not exist."""

from __future__ import annotations

from sqlalchemy.orm import Session

from registry.errors import NotFound
from registry.pool_lookup.repository import Lock, pool_named
from registry.tables import Pool

# The aliases a pool serves every adapter under; other aliases are the teams' own names.
PRODUCTION, CANARY = "production", "canary"


def pool_by_name(session: Session, name: str, *, lock: Lock = None) -> Pool:
    """The pool's row. `lock="share"`: a change holds this row's lock from its generation bump to
    its commit, so entries read after locking it for share see exactly that generation's set.
    `lock="update"`: every change to what a pool serves is serialized on it."""
    row = pool_named(session, name, lock=lock)
    if row is None:
        raise NotFound(f"pool {name!r} does not exist", code="pool_not_found",
                       hint="List them with GET /v1/pools (loraplane pool list); create one with "
                            "loraplane pool create.")
    return row
