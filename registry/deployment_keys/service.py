"""Publish the registry's key fingerprints (at its start), and refuse to start a process whose
keys are not the registry's, naming the setting to fix.

A process without LORAPLANE_SECRET_KEY makes a secret of its own in its data folder, and one
without the registry's attestation keys makes a keyring of its own: it would seal audit events
that read as altered in `loraplane audit verify`, and sign what nodes refuse. Neither is an
error until it writes; this check makes it one before it starts.

The secret is compared by a fingerprint derived from it for that alone (keys.py); the attestation
keys by whether this process holds the key the registry signs with."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from registry import audit
from registry.attestation_keys.keyring import get_keyring
from registry.deployment_keys import repository, rotation
from registry.errors import Unavailable
from registry import keys
from registry.settings import get_settings
from registry.tables import DeploymentKey

log = logging.getLogger(__name__)
SECRET, ATTESTATION = "secret", "attestation_signing_key"


class KeysDiffer(Unavailable):
    code = "keys_differ"


def own() -> dict[str, str]:
    """This process's fingerprints."""
    return {SECRET: _secret_fingerprint(), ATTESTATION: get_keyring().signing_key_id()}


def _secret_fingerprint() -> str:
    return keys.fingerprint(get_settings().signing_key())


def _previous_fingerprints() -> set[str]:
    return {keys.fingerprint(secret) for secret in get_settings().previous_secrets()}


def publish(session: Session, *, actor: str) -> None:
    """The registry's, as it starts: audited when they change. A secret rotated out since is
    carried over first (rotation.py)."""
    rotation.carry_over(session, actor=actor)
    before, mine = repository.published(session), own()
    if before == mine:
        return
    # (A new attestation key is a rotation of its own, audited there.)
    if before.get(SECRET) in _previous_fingerprints():
        log.warning("LORAPLANE_SECRET_KEY was rotated: what the previous secret keyed still "
                    "verifies; every worker and housekeeper now refuses to start until it has "
                    "the new secret")
    elif before.get(SECRET) not in (None, mine[SECRET]):
        log.error("this registry's LORAPLANE_SECRET_KEY differs from the one published before, "
                  "which is not in LORAPLANE_PREVIOUS_SECRET_KEYS: the audit events sealed before "
                  "read as altered, and every worker and housekeeper with the old secret now "
                  "refuses to start until it gets this one")
    now = datetime.now(UTC)
    for name, fingerprint in mine.items():
        row = session.get(DeploymentKey, name)
        if row is None:
            session.add(DeploymentKey(name=name, fingerprint=fingerprint, published_at=now))
        else:
            row.fingerprint, row.published_at = fingerprint, now
    session.flush()
    audit.record(session, actor=actor, action="deployment.keys.published", subject="deployment/keys",
                 before=before or None, after=mine)


def require_the_registrys(session: Session, process: str, *, signs: bool = True) -> None:
    """Refuse (KeysDiffer) when this process's keys are not the registry's: its secret, and its
    attestation keys when it `signs`. Before any registry has published (a first start), there
    is nothing to compare with yet."""
    published = repository.published(session)
    if not published:
        log.warning("no registry has published its key fingerprints yet: the %s starts unchecked",
                    process)
        return
    settings = get_settings()
    if published.get(SECRET) not in (None, _secret_fingerprint()):
        where = ("it is set here, to another value" if settings.secret_key is not None else
                 f"it is not set here, so this process made its own in {settings.data_dir / 'secret.key'}")

        raise KeysDiffer(
            f"this {process} does not hold the registry's LORAPLANE_SECRET_KEY ({where}): the audit "
            "events it wrote would read as altered",
            hint="Set LORAPLANE_SECRET_KEY to the registry's value on every registry, worker, "
                 "housekeeper and migration (compose.yaml gives it to each). After a rotation, "
                 "each gets the new secret, and the old one in LORAPLANE_PREVIOUS_SECRET_KEYS.")
    if not signs:
        return
    signing = published.get(ATTESTATION)
    held = {key.key_id for key in get_keyring().held()[1]}
    if signing is not None and signing not in held:
        source = (f"LORAPLANE_ATTESTATION_KEYRING={settings.attestation_keyring}"
                  if settings.attestation_keyring else
                  f"LORAPLANE_ATTESTATION_KEY_DIR={settings.attestation_key_dir}"
                  if settings.attestation_key_dir else
                  f"no LORAPLANE_ATTESTATION_KEY_DIR, so keys of its own in {settings.data_dir / 'attestation-keys'}")
        raise KeysDiffer(
            f"this {process} does not hold the registry's attestation key {signing} ({source}): "
            "what it signed, nodes would refuse",
            hint="Give it the registry's keys: the same LORAPLANE_ATTESTATION_KEY_DIR (one volume, "
                 "as compose.yaml mounts it) or the same LORAPLANE_ATTESTATION_KEYRING plug-in.")
