"""What a canary's analysis does on its own: step the canary's weight, roll it back, or make its
version production. The caller holds the pool's active-set change; every action is audited with
the evidence it was taken on, and the audit event goes to the tenant's webhooks.

Promoting needs no new reviewer: the reviewer who approved the canary approved its analysis
policy too, and that approval is the second pair of eyes. The production promotion records them
as its decider, and passes every gate again."""

from __future__ import annotations

from sqlalchemy.orm import Session

from registry.active_set.writing import changes
from registry.active_set.writing.change import ActiveSetChange
from registry.pool_lookup import CANARY, PRODUCTION
from registry.adapters import service as adapters
from registry.attestations import evaluated
from registry.errors import Conflict
from registry.promotions import activation, analysis_seals, gates, repository, rules
from registry.tables import Adapter, AdapterVersion, Pool, Promotion
from registry.traffic_windows import repository as windows
from registry.rows import existing

AUTOMATIC = "canary-analysis"
ANALYSING = "analysing"


def start(session: Session, canary: Promotion) -> None:
    """A canary with a policy became active: its first step begins."""
    analysis_seals.put(canary, {"step": 0, **step_start(session), "state": ANALYSING, "last": None})


def step_start(session: Session) -> dict:
    """A step begins when it is written, by the database's clock, the one every traffic window is
    stamped with: the traffic counted for it is what routers report after that, once the grace
    has passed (`canary_grace_s`), so that requests routed at the previous weight never count
    for this one, and a report that arrives late counts in the step it reaches."""
    return {"step_started_at": windows.database_now(session).isoformat()}


def step(session: Session, canary: Promotion, weight: int, change: ActiveSetChange,
         evidence: dict) -> None:
    canary.weight = weight
    changes.point_alias(session, change, adapter_id=canary.adapter_id, alias=CANARY,
                        version_id=canary.version_id, weight=weight, promotion_id=canary.id)
    activation.record(session, canary, "canary.step", AUTOMATIC, evidence=evidence)


def roll_back(session: Session, canary: Promotion, change: ActiveSetChange, evidence: dict) -> None:
    """Production takes all the traffic again; the canary's version leaves once traffic has moved."""
    rules.transition(canary, rules.ROLLED_BACK)
    canary.ended_at = activation.now()
    changes.drop_alias(session, change, adapter_id=canary.adapter_id, alias=CANARY)
    activation.record(session, canary, "canary.rolled_back", AUTOMATIC, evidence=evidence)


def promote(session: Session, canary: Promotion, change: ActiveSetChange, evidence: dict) -> str | None:
    """Make the canary's version production. Returns why it cannot, leaving everything as it was
    (a production request awaits a reviewer, or a gate blocks)."""
    if repository.awaiting_request(session, canary.pool_id, canary.adapter_id, PRODUCTION) is not None:
        return "a production promotion of this adapter awaits a reviewer; decide it first"
    version = existing(session, AdapterVersion, canary.version_id)
    served = adapters.version_out(session, version).served_name
    target = gates.Target(pool=existing(session, Pool, canary.pool_id),
                          adapter=existing(session, Adapter, canary.adapter_id),
                          version=version, served_name=served, alias=PRODUCTION, weight=None)
    results = gates.check(session, target)
    blocked = gates.blocking(results)
    if blocked:
        return "; ".join(f"[{g.name}] {g.message}" for g in blocked)
    try:  # activation refuses these too; said here, the canary is held with the reason
        evaluated.check(session, version, served)
    except Conflict as refused:
        return refused.message
    now = activation.now()
    promotion = Promotion(
        pool_id=canary.pool_id, adapter_id=canary.adapter_id, version_id=canary.version_id,
        alias=PRODUCTION, weight=None, kind=rules.PROMOTE, state=rules.REQUESTED,
        gates=[g.as_dict() for g in results], requested_by=AUTOMATIC, requested_by_subject=AUTOMATIC,
        requested_by_identity_id=canary.requested_by_identity_id,
        comment=f"canary {canary.id} passed every step of its analysis",
        decided_by=f"{AUTOMATIC} (policy approved by {canary.decided_by})",
        decided_by_identity_id=canary.decided_by_identity_id,
        decision_comment="the approved analysis policy decided", decided_at=now)
    session.add(promotion)
    session.flush()
    rules.transition(promotion, rules.AWAITING)
    rules.transition(promotion, rules.APPROVED)
    activation.activate(session, promotion, change, AUTOMATIC)
    activation.record(session, promotion, "canary.promoted", AUTOMATIC, evidence=evidence)
    return None
