"""The ledger of attestation keys from the environment (environment.py), kept in the database
and sealed with the deployment's secret: a restart with the same keys changes nothing; a restart
with a new key and the old one among the previous keys is a rotation, recorded once, that gives
the bundle a new version and the old key its overlap, as a folder keyring's rotation does.

A database writer cannot lengthen a replaced key's trust or move the version: a ledger whose seal
does not hold stops the registry's start, naming what to check."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from registry import audit, keys
from registry.audit import sealed
from registry.attestation_keys import repository
from registry.attestation_keys.environment import EnvironmentKeyring, Ledger
from registry.attestation_keys.keyring import get_keyring
from registry.errors import Unavailable
from registry.keys import Purpose
from registry.settings import get_settings
from registry.tables import AttestationKeyLedger

log = logging.getLogger(__name__)
ROTATED = "attestation_key.rotated"


class LedgerUntrusted(Unavailable):
    code = "attestation_key_ledger_untrusted"


def adopt(session: Session, *, actor: str) -> Ledger | None:
    """Bring the ledger in step with the keys this process was started with, and hand it to the
    keyring. None when the keys do not come from the environment."""
    keyring = get_keyring()
    if not isinstance(keyring, EnvironmentKeyring):
        return None
    row = repository.ledger_for_update(session)
    stored = _trusted(row) if row is not None else None
    _refuse_rollback(session, stored)
    ledger = _next(stored, keyring, datetime.now(UTC))
    if ledger != stored:
        _store(session, row, ledger)
        retired = stored.current if stored is not None else next(iter(ledger.trust_ends), None)
        if retired is not None and retired != ledger.current:  # a rotation (before the ledger, if stored is None)
            ends = ledger.trust_ends.get(retired)
            audit.record(session, actor=actor, action=ROTATED,
                         subject=f"attestation-key/{ledger.current}",
                         after={"retired_key_id": retired, "key_id": ledger.current,
                                "retired_key_trusted_until": ends.isoformat() if ends else None,
                                "version": ledger.version, "source": "environment"})
    keyring.adopt(ledger)
    return ledger


def _refuse_rollback(session: Session, stored: Ledger | None) -> None:
    """The ledger's version never goes back: not by deleting the row (a first start again, with
    fresh overlaps for every previous key), nor by putting an older sealed row back. The sealed
    rotation events say how far it got."""
    recorded = [event.after.get("version") for event in
                sealed.newest_sealed(session, ROTATED, "attestation-key/").values()
                if isinstance(event.after, dict) and event.after.get("source") == "environment"]
    highest = max((v for v in recorded if isinstance(v, int)), default=0)
    if highest > (stored.version if stored else 0):
        raise LedgerUntrusted(
            f"the attestation key ledger in the database is at version {stored.version if stored else 'none'}, "
            f"but the audit log records a rotation to version {highest}: it was deleted or put back "
            "from an older copy", hint="Restore the attestation_key_ledger row from the backup taken "
            "with the audit log, or compare it with the attestation_key.rotated events.")


def _next(stored: Ledger | None, keyring: EnvironmentKeyring, now: datetime) -> Ledger:
    current, previous = keyring.signing_key_id(), keyring.previous_key_ids()
    overlap = timedelta(seconds=get_settings().attestation_key_overlap_s)
    if stored is None:  # the first start; previous keys were rotated out before there was a ledger
        return Ledger(2 if previous else 1, current, {kid: now + overlap for kid in previous})
    if stored.current == current:
        return stored
    if current in stored.trust_ends:
        raise LedgerUntrusted(
            f"LORAPLANE_ATTESTATION_PRIVATE_KEY is {current[:16]}…, a key this deployment rotated "
            "out: nodes that followed the rotation trust it only until its overlap ends",
            hint="Deploy a new key to rotate again; never go back to a replaced one.")
    retired_until = now + overlap if stored.current in previous else now
    if stored.current not in previous:
        log.error("the attestation key was replaced without the old one in "
                  "LORAPLANE_ATTESTATION_PREVIOUS_PRIVATE_KEYS: the new trust bundle is not signed "
                  "by the key nodes pinned, so each refuses it until its operator pins it again")
    trust_ends = {kid: end for kid, end in stored.trust_ends.items() if end > now}
    return Ledger(stored.version + 1, current, {**trust_ends, stored.current: retired_until})


def _trusted(row: AttestationKeyLedger) -> Ledger:
    ledger = Ledger(row.version, row.current_key_id,
                    {kid: datetime.fromisoformat(end) for kid, end in row.trust_ends.items()})
    if not keys.verifies_current(Purpose.ATTESTATION_KEY_LEDGER, _message(ledger), row.seal):
        raise LedgerUntrusted(
            "the attestation key ledger in the database does not hold its seal: it was changed "
            "outside the registry, or this registry does not hold the deployment's "
            "LORAPLANE_SECRET_KEY", hint="Check LORAPLANE_SECRET_KEY first; then compare the "
            "attestation_key_ledger row with a backup and the attestation_key.rotated audit events.")
    return ledger


def reseal(session: Session) -> int:
    """After LORAPLANE_SECRET_KEY is rotated: the ledger, sealed under the previous secret, sealed
    under the new one. 1 when it was, else 0."""
    row = repository.ledger_for_update(session)
    if row is None:
        return 0
    ledger = Ledger(row.version, row.current_key_id,
                    {kid: datetime.fromisoformat(end) for kid, end in row.trust_ends.items()})
    secret = keys.matching(Purpose.ATTESTATION_KEY_LEDGER, _message(ledger), row.seal)
    if secret is None or secret == keys.current_fingerprint():
        return 0
    _store(session, row, ledger)
    return 1


def _store(session: Session, row: AttestationKeyLedger | None, ledger: Ledger) -> None:
    if row is None:
        row = AttestationKeyLedger(name=repository.LEDGER)
        session.add(row)
    row.version, row.current_key_id = ledger.version, ledger.current
    row.trust_ends = {kid: end.isoformat() for kid, end in ledger.trust_ends.items()}
    row.seal = keys.sign(Purpose.ATTESTATION_KEY_LEDGER, _message(ledger))
    row.updated_at = datetime.now(UTC)
    session.flush()


def _message(ledger: Ledger) -> bytes:
    ends = {kid: end.astimezone(UTC).isoformat() for kid, end in sorted(ledger.trust_ends.items())}
    return json.dumps([ledger.version, ledger.current, ends], separators=(",", ":")).encode()
