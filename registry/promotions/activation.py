"""Making a promotion active: its alias points at the version in the pool's active set, the one
it replaces is superseded, and its attestation is signed as the transaction commits. Every step is
audited, and each audit event goes to the tenant's webhooks."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.orm import Session

from registry import audit, webhooks
from registry.active_set.writing import changes
from registry.active_set.writing.change import ActiveSetChange
from registry.pool_lookup import CANARY, PRODUCTION
from registry.attestations import evaluated, issuing as attestations
from registry.promotions import repository, rules
from registry.adapters import service as adapters
from registry.tables import Adapter, AdapterVersion, Pool, Promotion
from registry.rows import existing


def activate(session: Session, promotion: Promotion, change: ActiveSetChange, actor: str) -> None:
    current = repository.active_promotion_for_update(session, promotion.pool_id, promotion.adapter_id,
                                                     promotion.alias)
    if current is not None:
        rules.transition(current, rules.SUPERSEDED)
        current.ended_at = now()
        promotion.previous_id = current.id
        record(session, current, "promotion.superseded", actor)
    point(session, promotion, change)
    if promotion.alias == PRODUCTION:
        graduate_canary(session, promotion, change, actor)


def point(session: Session, promotion: Promotion, change: ActiveSetChange, *,
          restoring: bool = False) -> None:
    """Raises Conflict, before anything changes, when the version's bytes are not the ones that
    were uploaded and evaluated (attestations/evaluated.py): its attestation would sign them.
    `restoring` (a rollback, said by the code path, never by a row) checks the upload, and that
    this registry signed an approval of these bytes in this pool before: that version's
    evaluations vouched for it then."""
    version = existing(session, AdapterVersion, promotion.version_id)
    evaluated.check(session, version, adapters.version_out(session, version).served_name,
                    evaluations=not restoring, approved_in=session.get(Pool, promotion.pool_id) if restoring else None)
    changes.point_alias(session, change, adapter_id=promotion.adapter_id, alias=promotion.alias,
                        version_id=promotion.version_id, weight=promotion.weight,
                        promotion_id=promotion.id)
    rules.transition(promotion, rules.ACTIVE)
    promotion.activated_at = now()
    promotion.evaluation_policy = existing(session, Adapter, promotion.adapter_id).evaluation_policy or {}
    event = record(session, promotion, "promotion.activated", promotion.decided_by or promotion.requested_by)
    action = attestations.ROLLBACK if promotion.kind == rules.ROLLBACK else attestations.APPROVE
    attestations.issue_on_commit(session, promotion, action, event)


def graduate_canary(session: Session, promotion: Promotion, change: ActiveSetChange, actor: str) -> None:
    """Promoting the canary's version to production ends the canary: it would split nothing."""
    canary = repository.active_promotion_for_update(session, promotion.pool_id, promotion.adapter_id,
                                                    CANARY, version_id=promotion.version_id)
    if canary is not None:
        rules.transition(canary, rules.SUPERSEDED)
        canary.ended_at = now()
        changes.drop_alias(session, change, adapter_id=promotion.adapter_id, alias=CANARY)
        record(session, canary, "promotion.superseded", actor)


def record(session: Session, promotion: Promotion, action: str, actor: str, *,
           comment: str | None = None, evidence: dict | None = None) -> dict:
    """Audit a step of the promotion and send it to the tenant's webhooks; `evidence` (what an
    automatic decision was based on) goes into the event as it is."""
    version = adapters.version_out(session, existing(session, AdapterVersion, promotion.version_id))
    pool = existing(session, Pool, promotion.pool_id).name
    data = {"id": promotion.id, "pool": pool, "served_name": version.served_name,
            "digest": version.digest, "alias": promotion.alias, "weight": promotion.weight,
            "kind": promotion.kind, "state": promotion.state, "previous_id": promotion.previous_id}
    if comment:
        data["comment"] = comment
    if evidence is not None:
        data["evidence"] = evidence
    tenant_id = existing(session, Adapter, promotion.adapter_id).tenant_id
    event = audit.record(session, actor=actor, action=action, subject=f"pool/{pool}/{version.served_name}",
                         tenant_id=tenant_id, after=data)
    webhooks.emit(session, action, tenant_id=tenant_id, data=data)
    return event


def now() -> datetime:
    return datetime.now(UTC)
