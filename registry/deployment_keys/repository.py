from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from registry.tables import DeploymentKey


def published(session: Session) -> dict[str, str]:
    return {row.name: row.fingerprint for row in session.scalars(select(DeploymentKey))}
