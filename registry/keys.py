"""One key per purpose, derived from the deployment's secret with HKDF. Nothing signed for one
purpose verifies for another: a value a visitor chooses (a CSRF nonce) is never signed with the
key that signs download links, sessions or audit heads."""

from __future__ import annotations

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
    KEY_FINGERPRINT = "key-fingerprint"  # published, so derived for that alone


def key_for(purpose: Purpose) -> bytes:
    return _derive(get_settings().signing_key(), purpose)


@cache
def _derive(secret: bytes, purpose: Purpose) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=b"loraplane/keys/v1",
                info=purpose.value.encode()).derive(secret)
