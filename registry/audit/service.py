from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from registry.tables import AuditEvent


def record(
    session: Session,
    *,
    actor: str,
    action: str,
    subject: str,
    tenant_id: int | None = None,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> None:
    session.add(
        AuditEvent(
            actor=actor, action=action, subject=subject, tenant_id=tenant_id, before=before, after=after
        )
    )
