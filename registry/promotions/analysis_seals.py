"""A canary's approved analysis policy and its state (its step, when the step began, a reviewer's
confirmation, an opened gate) are sealed as the registry writes them: a keyed hash, under a key
derived from LORAPLANE_SECRET_KEY that the database never sees, of the promotion, its policy and
its state. Someone who can write to the database cannot loosen the policy, skip a step, restart a
step's window or forge a confirmation: a canary whose seal does not hold is neither judged nor
acted on, and refuses pauses and resumes (which would seal what was written). Roll it back.

(The routers a verdict needs, `canary_min_routers`, are part of the pool's signed active set.)"""

from __future__ import annotations

import json

from sqlalchemy.orm import Session

from registry import audit, keys
from registry.keys import Purpose
from registry.promotions import repository
from registry.tables import Promotion


def put(promotion: Promotion, state: dict) -> None:
    """Write the canary's analysis state, sealed with its policy."""
    promotion.analysis_state = dict(state)  # a new object: JSON columns track assignment
    promotion.analysis_seal = seal(promotion)


def holds(promotion: Promotion) -> bool:
    return promotion.analysis_seal is not None and keys.verifies_current(
        Purpose.CANARY_ANALYSIS, _message(promotion), promotion.analysis_seal)


def reseal(session: Session) -> int:
    """After LORAPLANE_SECRET_KEY is rotated: each canary's analysis sealed under the previous
    secret, sealed under the new one (the rotation's own audit event counts them)."""
    resealed = 0
    for promotion in repository.analysed_canaries(session):
        if promotion.analysis_seal is None:
            continue
        secret = keys.matching(Purpose.CANARY_ANALYSIS, _message(promotion), promotion.analysis_seal)
        if secret is not None and secret != keys.current_fingerprint():
            promotion.analysis_seal = seal(promotion)
            resealed += 1
    session.flush()
    return resealed


def seal(promotion: Promotion) -> str:
    return keys.sign(Purpose.CANARY_ANALYSIS, _message(promotion))


def _message(promotion: Promotion) -> bytes:
    return json.dumps([promotion.id, promotion.pool_id, promotion.adapter_id, promotion.version_id,
                       promotion.analysis, promotion.analysis_state],
                      sort_keys=True, separators=(",", ":")).encode()


def seal_unsealed(session: Session, *, actor: str) -> list[int]:
    """Seal the analysis of active canaries that have no seal (started before there were seals),
    auditing each with the policy and state it sealed. Returns their ids."""
    sealed: list[int] = []
    for promotion in repository.unsealed_canaries(session):
        state = promotion.analysis_state
        if state is None:  # JSON null written by hand passes the query's IS NOT NULL: not under analysis
            continue
        put(promotion, state)
        audit.record(session, actor=actor, action="canary.analysis.sealed", subject=f"promotion/{promotion.id}",
                     after={"analysis": promotion.analysis, "analysis_state": promotion.analysis_state})
        sealed.append(promotion.id)
    return sealed
