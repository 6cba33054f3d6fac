"""One key per purpose, derived from the deployment's secret with HKDF. Nothing signed for one
purpose verifies for another: a value a visitor chooses (a CSRF nonce) is never signed with the
key that signs download links, sessions or audit heads.

The secret can be rotated: LORAPLANE_SECRET_KEY keys everything new (`key_for`, `sign`), and
what a secret in LORAPLANE_PREVIOUS_SECRET_KEYS keyed still verifies (`keys_for`, `verifies`)."""

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
    ATTESTATION_KEY_LEDGER = "attestation-key-ledger"
    KEY_FINGERPRINT = "key-fingerprint"  # published, so derived for that alone


def key_for(purpose: Purpose) -> bytes:
    """The key everything new is keyed with."""
    return _derive(get_settings().signing_key(), purpose)


def keys_for(purpose: Purpose) -> tuple[bytes, ...]:
    """Every key that verifies: the current one first, then the previous secrets', newest first."""
    settings = get_settings()
    return tuple(_derive(secret, purpose)
                 for secret in (settings.signing_key(), *settings.previous_secrets()))


def sign(purpose: Purpose, message: bytes) -> str:
    return hmac.new(key_for(purpose), message, hashlib.sha256).hexdigest()


def verifies(purpose: Purpose, message: bytes, digest: str) -> bool:
    """Whether `digest` is `message`'s HMAC under the current secret or a previous one."""
    return any(hmac.compare_digest(digest.encode(errors="replace"),
                                   hmac.new(key, message, hashlib.sha256).hexdigest().encode())
               for key in keys_for(purpose))


def fingerprint(secret: bytes) -> str:
    """A secret's published name: derived for that alone, so it says nothing of other keys."""
    return hashlib.sha256(_derive(secret, Purpose.KEY_FINGERPRINT)).hexdigest()[:32]


@cache
def _derive(secret: bytes, purpose: Purpose) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=b"loraplane/keys/v1",
                info=purpose.value.encode()).derive(secret)
