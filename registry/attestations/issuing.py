"""Sign attestations. A promotion's is signed as its unit of work commits (step 2 of
`UnitOfWork.commit`), once the audit event of the change has its place in the hash chain: the
statement names that event's hash, so the chain bytes → attestation → audit log can be walked in
both directions."""

from __future__ import annotations

import hashlib
from typing import Any

from sqlalchemy.orm import Session

from registry import pending_work
from registry.attestations import evidence
from registry.pending_work import AttestationDue
from registry.attestation_keys.keyring import get_keyring
from registry.rows import existing
from registry.tables import AdapterVersion, Attestation, Promotion
from signed_digests import provenance

APPROVE, ROLLBACK, RESIGN, BACKFILL = "approve", "rollback", "resign", "backfill"


def issue_on_commit(session: Session, promotion: Promotion, action: str,
                    audit_event: dict[str, Any]) -> None:
    """Sign the promotion's attestation as the transaction commits, naming `audit_event`."""
    pending_work.of(session).attestations_due.append(AttestationDue(promotion, action, audit_event))


def sign_due(session: Session, due: list[AttestationDue]) -> None:
    """Sign what the transaction's changes call for, their audit events sealed (the commit)."""
    for attestation in due:
        issue(session, attestation.promotion, attestation.action,
              attestation.audit_event.get("sealed_hash"))


def issue(session: Session, promotion: Promotion, action: str, audit_hash: str | None) -> Attestation:
    """Attest the promotion's version as the database holds it now."""
    version = existing(session, AdapterVersion, promotion.version_id)
    statement = provenance.statement(evidence.served_name(session, version), version.digest,
                                     version.files, evidence.predicate(session, promotion, action, audit_hash))
    return store(session, promotion.pool_id, version.id, promotion.id, action, statement, audit_hash)


def store(session: Session, pool_id: int, version_id: int, promotion_id: int | None, action: str,
          statement: dict[str, Any], audit_hash: str | None) -> Attestation:
    keyring = get_keyring()
    kid = keyring.signing_key_id()
    envelope = provenance.envelope(provenance.IN_TOTO_PAYLOAD, statement,
                                   [(kid, lambda message: keyring.sign(kid, message))])
    row = Attestation(pool_id=pool_id, version_id=version_id, promotion_id=promotion_id,
                      action=action, key_id=kid, envelope=envelope, audit_event_hash=audit_hash,
                      statement_sha256=hashlib.sha256(provenance.canonical(statement)).hexdigest())
    session.add(row)
    session.flush()
    return row
