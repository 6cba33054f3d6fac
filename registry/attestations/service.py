"""Issue, re-sign and read attestations, and publish the trust bundle.

An attestation is signed as its transaction commits (`audit.when_sealed`), once the audit event
of the change has its place in the hash chain: the statement names that event's hash, so the
chain bytes → attestation → audit log can be walked in both directions."""

from __future__ import annotations

import hashlib
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from loraplane import provenance
from registry import audit
from registry.active_set import changes
from registry.attestations import evidence
from registry.attestations.keyring import get_keyring
from registry.attestations.schemas import RotationOut
from registry.db import transaction
from registry.tables import (
    AdapterVersion, Attestation, AuditEvent, Pool, PoolAlias, PoolRetirement, Promotion,
)

log = logging.getLogger(__name__)
APPROVE, ROLLBACK, RESIGN, BACKFILL = "approve", "rollback", "resign", "backfill"
# Any constant works; it keeps two registry processes from re-signing or backfilling at once.
RESIGN_LOCK = 7_260_002


def issue_on_commit(session: Session, promotion: Promotion, action: str,
                    audit_event: dict[str, Any]) -> None:
    """Sign the promotion's attestation as the transaction commits, naming `audit_event`."""
    def sign(_head) -> None:
        _issue(session, promotion, action, audit_event.get("sealed_hash"))

    audit.when_sealed(session, sign)


def _issue(session: Session, promotion: Promotion, action: str, audit_hash: str | None) -> Attestation:
    version = session.get(AdapterVersion, promotion.version_id)
    statement = provenance.statement(evidence.served_name(session, version), version.digest,
                                     version.files, evidence.predicate(session, promotion, action, audit_hash))
    return _store(session, promotion.pool_id, version.id, promotion.id, action, statement, audit_hash)


def _store(session: Session, pool_id: int, version_id: int, promotion_id: int | None, action: str,
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


def of_version(session: Session, version_id: int) -> list[Attestation]:
    return list(session.scalars(select(Attestation).where(Attestation.version_id == version_id)
                                .order_by(Attestation.id)))


def resign_active(session: Session) -> int:
    """Sign each active version's newest statement again with the current key (after a rotation):
    the statement is unchanged, only the signature is new. Returns how many were re-signed."""
    _lock(session)
    kid, count, changed = get_keyring().signing_key_id(), 0, set()
    for pool_id, version_id in _active(session):
        latest = session.scalar(select(Attestation).where(
            Attestation.pool_id == pool_id, Attestation.version_id == version_id)
            .order_by(Attestation.id.desc()).limit(1))
        if latest is None or latest.key_id == kid:
            continue
        statement = provenance.unverified_statement(latest.envelope)
        _store(session, pool_id, version_id, latest.promotion_id, RESIGN, statement,
               latest.audit_event_hash)
        count += 1
        changed.add(pool_id)
    for pool_id in sorted(changed):  # nodes receive the new signatures with a new generation
        changes.begin_change(session, pool_id)
    return count


def backfill(session: Session) -> int:
    """Attest active versions approved before attestations existed, from their promotion and its
    audit event. Returns how many."""
    _lock(session)
    count, changed = 0, set()
    for pool_id, version_id in _active(session):
        if session.scalar(select(Attestation.id).where(Attestation.pool_id == pool_id,
                                                       Attestation.version_id == version_id).limit(1)):
            continue
        promotion = session.scalar(select(Promotion).where(
            Promotion.pool_id == pool_id, Promotion.version_id == version_id,
            Promotion.activated_at.is_not(None)).order_by(Promotion.id.desc()).limit(1))
        if promotion is None:
            continue
        pool = session.get(Pool, pool_id)
        served = evidence.served_name(session, session.get(AdapterVersion, version_id))
        audit_hash = session.scalar(select(AuditEvent.hash).where(
            AuditEvent.action == "promotion.activated", AuditEvent.subject == f"pool/{pool.name}/{served}")
            .order_by(AuditEvent.id.desc()).limit(1))
        _issue(session, promotion, BACKFILL, audit_hash)
        count += 1
        changed.add(pool_id)
    for pool_id in sorted(changed):
        changes.begin_change(session, pool_id)
    return count


def attest_active() -> None:
    """At start: attest what was approved before attestations existed, and re-sign what a key
    rotated out since signed."""
    with transaction() as session:
        backfilled, resigned = backfill(session), resign_active(session)
    if backfilled or resigned:
        log.info("attested %d active versions and re-signed %d", backfilled, resigned)


def trust_bundle() -> dict[str, Any]:
    """The public keys that may sign, as an envelope signed by each of them."""
    keyring = get_keyring()
    version, keys = keyring.published()
    document = {"version": version, "issued_at": datetime.now(UTC).isoformat(),
                "keys": [key.as_bundle_item() for key in keys]}
    return provenance.envelope(provenance.BUNDLE_PAYLOAD, document,
                               [(key.key_id, lambda message, kid=key.key_id: keyring.sign(kid, message))
                                for key in keys])


def rotate(session: Session, principal, overlap: timedelta) -> RotationOut:
    """A new signing key; the retired one stays trusted for `overlap`, and every active version's
    statement is signed again with the new key at once. (Should this transaction fail after the
    key changed, the registry's next start re-signs.)"""
    keyring = get_keyring()
    retired = keyring.signing_key_id()
    new = keyring.rotate(overlap)
    resigned = resign_active(session)
    out = RotationOut(retired_key_id=retired, key_id=new, resigned=resigned,
                      retired_key_trusted_until=datetime.now(UTC) + overlap)
    audit.record(session, actor=principal.label, action="attestation_key.rotated",
                 subject=f"attestation-key/{new}", after=out.model_dump(mode="json"))
    return out


def _active(session: Session) -> list[tuple[int, int]]:
    aliased = select(PoolAlias.pool_id, PoolAlias.version_id)
    retiring = select(PoolRetirement.pool_id, PoolRetirement.version_id)
    return sorted(set(session.execute(aliased).all()) | set(session.execute(retiring).all()))


def _lock(session: Session) -> None:
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": RESIGN_LOCK})
