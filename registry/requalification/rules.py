"""Causes, and the state machine of a mark (the policies are the active set's, registry/
active_set/reading/suspension.py). Every change to a mark goes through `clear`.

open -> requalified   every required suite passed an evaluation that finished after the mark
open -> left_pool     the version no longer serves in the pool (rolled back, replaced, retired)
open -> superseded    the base config changed again (or back) before the version qualified
"""

from __future__ import annotations

from datetime import datetime

from registry.errors import Conflict
from registry.tables import Requalification

ENGINE, BASE_CONFIG = "engine", "base_config"
REQUALIFIED, LEFT_POOL, SUPERSEDED = "requalified", "left_pool", "superseded"
OUTCOMES = frozenset({REQUALIFIED, LEFT_POOL, SUPERSEDED})


def clear(mark: Requalification, outcome: str, *, at: datetime,
          evaluation_ids: list[int] | None = None) -> None:
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r}")
    if mark.cleared_at is not None:
        raise Conflict(f"re-qualification mark {mark.id} is already {mark.outcome}",
                       code="invalid_transition")
    mark.cleared_at, mark.outcome = at, outcome
    mark.cleared_with = evaluation_ids if outcome == REQUALIFIED else None
