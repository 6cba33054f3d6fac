"""Queries behind canary analysis: the canaries under analysis."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from registry.promotions.rules import ACTIVE
from registry.tables import Promotion


def analysed_canary_ids(session: Session) -> list[int]:
    """Active promotions that carry an analysis policy, oldest first."""
    return list(session.scalars(select(Promotion.id).where(
        Promotion.state == ACTIVE, Promotion.analysis.is_not(None)).order_by(Promotion.id)))
