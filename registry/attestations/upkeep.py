"""Keep the active set attested: re-sign after a key rotation, and attest, on an operator's
request, versions approved before attestations existed.

Neither signs what the database merely says. Re-signing copies a statement only when the
registry's own key signed it (whoever can write the database cannot make the registry sign
other bytes at its next start), and backfilling is an explicit, audited act of a global admin."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from registry import audit
from registry.active_set.writing.change import new_generation
from registry.active_set.signed_set import Untrusted
from registry.attestations import evaluated, evidence, issuing, repository
from registry.attestation_keys.bundle import own_keys
from registry.attestation_keys.keyring import get_keyring
from registry.attestation_keys.published import RotationUnsupported
from registry.attestations.schemas import RotationOut
from registry.auth.principal import Principal
from registry.errors import Conflict, Unprocessable
from registry.rows import existing
from registry.settings import get_settings
from registry.tables import AdapterVersion, Pool, Promotion
from signed_digests import provenance

log = logging.getLogger(__name__)
# Any constant works; it keeps two registry processes from re-signing or backfilling at once.
UPKEEP_LOCK = 7_260_002


def resign_active(session: Session) -> int:
    """Sign each active version's newest statement again with the current key: the statement is
    unchanged, only the signature is new. Returns how many were re-signed."""
    _lock(session)
    kid, ours, count, changed = get_keyring().signing_key_id(), own_keys(), 0, set()
    leaked = {key.key_id for key in get_keyring().held()[1] if key.emergency}
    for pool_id, version_id in repository.active_pairs(session):
        latest = repository.newest_of(session, pool_id, version_id)
        if latest is None or latest.key_id == kid:
            continue
        if latest.key_id in leaked:  # whoever holds it may have signed this row: never copied
            if _issue_afresh(session, latest):
                count += 1
                changed.add(pool_id)
            continue
        try:
            statement = ours.verify(latest.envelope)
        except provenance.Unverified as problem:
            log.error("attestation %s was not signed by this registry's keys (%s): not re-signed",
                      latest.id, problem)
            continue
        issuing.store(session, pool_id, version_id, latest.promotion_id, issuing.RESIGN, statement,
                      latest.audit_event_hash)
        count += 1
        changed.add(pool_id)
    # Pools whose signed set an older key signed: a new generation signs it with the current one.
    changed |= {pool_id for pool_id, key_id in repository.active_set_signers(session) if key_id != kid}
    for pool_id in sorted(changed):  # nodes receive the new signatures with a new generation
        try:
            with session.begin_nested():
                new_generation(session, pool_id)
        except Untrusted as untrusted:  # its set does not verify: the operator's to seal again
            log.error("pool %d's active set was not signed again: %s", pool_id, untrusted.message)
    return count


def _issue_afresh(session: Session, latest) -> bool:
    """Sign the version's statement anew from the evidence, as an approval does, once its bytes
    are the ones uploaded and evaluated (evaluated.py); False, logged, when they are not."""
    promotion = session.get(Promotion, latest.promotion_id) if latest.promotion_id else None
    version = session.get(AdapterVersion, latest.version_id)
    if promotion is None or version is None:
        log.error("attestation %s names no promotion: not signed again", latest.id)
        return False
    try:
        evaluated.check(session, version, evidence.served_name(session, version))
    except Conflict as refused:
        log.error("attestation %s was signed with a key ended in an emergency and its version "
                  "cannot be signed again: %s", latest.id, refused.message)
        return False
    issuing.issue(session, promotion, issuing.RESIGN, latest.audit_event_hash)
    return True


def backfill(session: Session, principal: Principal) -> int:
    """Attest active versions that have no attestation (approved before attestations existed),
    from their promotion and its audit event. Returns how many."""
    principal.require_global_admin()
    _lock(session)
    attested: list[str] = []
    changed = set()
    for pool_id, version_id in repository.active_pairs(session):
        if repository.is_attested(session, pool_id, version_id):
            continue
        promotion = repository.newest_activated_promotion(session, pool_id, version_id)
        if promotion is None:
            continue
        pool = existing(session, Pool, pool_id)
        version = existing(session, AdapterVersion, version_id)
        served = evidence.served_name(session, version)
        try:  # approved before evaluations recorded their digest: the upload's record, at least
            evaluated.check(session, version, served, evaluations=False)
        except Conflict as refused:
            log.error("not backfilled: %s", refused.message)
            continue
        audit_hash = repository.activation_event_hash(session, f"pool/{pool.name}/{served}",
                                                      promotion.id)
        issuing.issue(session, promotion, issuing.BACKFILL, audit_hash)
        attested.append(f"{pool.name}/{served}")
        changed.add(pool_id)
    for pool_id in sorted(changed):
        new_generation(session, pool_id)
    if attested:
        audit.record(session, actor=principal.label, action="attestation.backfilled",
                     subject="attestations", after={"attested": attested})
    return len(attested)


def rotate(session: Session, principal: Principal, overlap_s: int | None,
           emergency: bool = False) -> RotationOut:
    """A new signing key; the retired one stays trusted for the overlap, and every active
    version's statement is signed again with the new key at once. (Should this transaction fail
    after the key changed, the registry's next start re-signs.)"""
    principal.require_global_admin()
    settings = get_settings()
    if emergency and overlap_s is not None:
        raise Unprocessable("an emergency rotation has no overlap", code="overlap_in_emergency",
                            hint="Drop overlap_s: the retired key's trust ends at once.")
    overlap_s = 0 if emergency else settings.attestation_key_overlap_s if overlap_s is None else overlap_s
    if not emergency and overlap_s < settings.attestation_min_overlap_s:
        raise Unprocessable(
            f"an overlap of {overlap_s} s is shorter than this registry's minimum of "
            f"{settings.attestation_min_overlap_s} s", code="overlap_too_short",
            hint="Nodes away longer than the overlap could not follow the rotation; give them time.")
    keyring = get_keyring()
    retired = keyring.signing_key_id()
    overlap = timedelta(seconds=overlap_s)
    try:
        new = keyring.rotate(overlap)
    except RotationUnsupported as error:
        raise Conflict(f"this registry cannot rotate its attestation key: {error}",
                       code="rotation_unsupported",
                       hint="Deploy a new key where it comes from, then restart the registry.") from None
    resigned = resign_active(session)
    _, held = keyring.held()
    trusted_until = next((k.not_after for k in held if k.key_id == retired and k.not_after),
                         datetime.now(UTC) + overlap)
    out = RotationOut(retired_key_id=retired, key_id=new, resigned=resigned,
                      retired_key_trusted_until=trusted_until, emergency=emergency)
    audit.record(session, actor=principal.label, action="attestation_key.rotated",
                 subject=f"attestation-key/{new}", after=out.model_dump(mode="json"))
    return out


def _lock(session: Session) -> None:
    if session.get_bind().dialect.name == "postgresql":
        repository.lock_upkeep(session, UPKEEP_LOCK)
