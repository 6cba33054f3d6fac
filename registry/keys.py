"""One key per purpose, derived from the deployment's secret with HKDF. Nothing signed for one
purpose verifies for another: a value a visitor chooses (a CSRF nonce) is never signed with the
key that signs download links, sessions or audit heads.

The secret can be rotated: LORAPLANE_SECRET_KEY keys everything new (`key_for`, `sign`). What a
secret in LORAPLANE_PREVIOUS_SECRET_KEYS keyed verifies in two ways. Short-lived values (sessions,
forms, download links) verify under any listed secret (`verifies`). Rows that are re-sealed at a
rotation (node addresses, canary analyses, traffic windows, the key ledger, sign-on grants) verify
under the current secret alone (`verifies_current`), and history (audit events, token hashes) under
the secret that keyed it up to the rotation's checkpoint (`matching`, registry/secret_checkpoints/):
whoever still holds a rotated-out secret cannot write anything new that is believed."""

from __future__ import annotations

import hashlib
import hmac
from enum import StrEnum
from functools import cache

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from registry.settings import get_settings


class Purpose(StrEnum):
    DOWNLOAD_LINKS = "download-links"
    DASHBOARD_SESSIONS = "dashboard-sessions"
    CSRF = "csrf"
    AUDIT_CHAIN = "audit-chain"
    AUDIT_HEAD = "audit-head"
    NODE_ADDRESSES = "node-addresses"
    API_TOKENS = "api-tokens"
    TRAFFIC_WINDOWS = "traffic-windows"
    CANARY_ANALYSIS = "canary-analysis"
    SSO_STATE = "sso-state"
    SSO_EXCHANGE = "sso-exchange"
    ATTESTATION_KEY_LEDGER = "attestation-key-ledger"
    SECRET_CHECKPOINTS = "secret-checkpoints"
    KEY_FINGERPRINT = "key-fingerprint"  # published, so derived for that alone


def key_for(purpose: Purpose) -> bytes:
    """The key everything new is keyed with."""
    return _derive(get_settings().signing_key(), purpose)


def keyed(purpose: Purpose) -> list[tuple[str, bytes]]:
    """(the secret's fingerprint, its key for `purpose`): the current secret first, then the
    previous ones, newest first."""
    settings = get_settings()
    return [(fingerprint(secret), _derive(secret, purpose))
            for secret in (settings.signing_key(), *settings.previous_secrets())]


def keys_for(purpose: Purpose) -> tuple[bytes, ...]:
    """Every key that verifies a short-lived value: the current one first."""
    return tuple(key for _, key in keyed(purpose))


def current_fingerprint() -> str:
    return fingerprint(get_settings().signing_key())


def sign(purpose: Purpose, message: bytes) -> str:
    return hmac.new(key_for(purpose), message, hashlib.sha256).hexdigest()


def matching(purpose: Purpose, message: bytes, digest: str) -> str | None:
    """The fingerprint of the secret whose key made `digest` of `message`, or None."""
    for secret, key in keyed(purpose):
        if hmac.compare_digest(digest.encode(errors="replace"),
                               hmac.new(key, message, hashlib.sha256).hexdigest().encode()):
            return secret
    return None


def verifies(purpose: Purpose, message: bytes, digest: str) -> bool:
    """A short-lived value: under the current secret or a previous one."""
    return matching(purpose, message, digest) is not None


def verifies_current(purpose: Purpose, message: bytes, digest: str) -> bool:
    """A row re-sealed at every rotation: under the current secret alone."""
    return hmac.compare_digest(digest.encode(errors="replace"), sign(purpose, message).encode())


@cache
def fingerprint(secret: bytes) -> str:
    """A secret's published name: derived for that alone, so it says nothing of other keys."""
    return hashlib.sha256(_derive(secret, Purpose.KEY_FINGERPRINT)).hexdigest()[:32]


@cache
def _derive(secret: bytes, purpose: Purpose) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=b"loraplane/keys/v1",
                info=purpose.value.encode()).derive(secret)
