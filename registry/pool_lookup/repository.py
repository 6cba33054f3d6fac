from __future__ import annotations

from typing import Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from registry.tables import Pool

Lock = Literal["share", "update"] | None


def pool_named(session: Session, name: str, *, lock: Lock = None) -> Pool | None:
    query = select(Pool).where(Pool.name == name)
    if lock == "share":
        query = query.with_for_update(read=True)
    elif lock == "update":
        query = query.with_for_update()
    return session.scalar(query)
