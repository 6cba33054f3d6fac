"""What an attestation says about a version: the predicate of its in-toto statement, gathered from
the promotion that points an alias at it, the people involved (identities, never free text), the
evaluations that let it through, and the base model it serves on."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from registry.base_models.stored_tables import config_digest
from registry.evaluations.repository import latest_evaluations
from registry.rows import existing
from registry.tables import Adapter, AdapterVersion, BaseModel, Identity, Pool, Promotion, Tenant


def served_name(session: Session, version: AdapterVersion) -> str:
    adapter = existing(session, Adapter, version.adapter_id)
    return f"{existing(session, Tenant, adapter.tenant_id).name}/{adapter.name}@{version.number}"


def predicate(session: Session, promotion: Promotion, action: str,
              audit_event_hash: str | None) -> dict[str, Any]:
    pool = existing(session, Pool, promotion.pool_id)
    version = existing(session, AdapterVersion, promotion.version_id)
    base = existing(session, BaseModel, pool.base_model_id)
    return {
        "action": action,
        "pool": pool.name,
        "served_name": served_name(session, version),
        "alias": promotion.alias,
        "weight": promotion.weight if promotion.weight is not None else 100,
        "promotion_id": promotion.id,
        "base_model": {"name": base.name,
                       "config_sha256": config_digest(base.config)},
        "evaluations": [_evaluation(suite, e) for suite, e in
                        sorted(latest_evaluations(session, version.id).items())],
        "uploader": _person(session, version.uploaded_by_identity_id, version.uploaded_by),
        "requester": _person(session, promotion.requested_by_identity_id, promotion.requested_by),
        "approver": _person(session, promotion.decided_by_identity_id, promotion.decided_by),
        "comment": promotion.decision_comment,
        "approved_at": _iso(promotion.decided_at),
        "signed_at": datetime.now(UTC).isoformat(),
        "audit_event_hash": audit_event_hash,
        "upload_signature": version.upload_signature,
        # The upload the served bytes were derived from (fold_scaling), or null.
        "derived_from": version.derived_from,
    }


def _evaluation(suite: str, evaluation) -> dict[str, Any]:
    return {"id": evaluation.id, "suite": suite, "state": evaluation.state,
            "metrics": evaluation.metrics, "engine": evaluation.engine,
            "finished_at": _iso(evaluation.finished_at)}


def _person(session: Session, identity_id: int | None, label: str | None) -> dict[str, Any] | None:
    if label is None:
        return None
    identity = session.get(Identity, identity_id) if identity_id else None
    return {"identity_id": identity_id, "name": identity.name if identity else None, "label": label}


def _iso(when: datetime | None) -> str | None:
    return when.isoformat() if when else None
