"""The trust bundle: the public keys still trusted, each with the end of its trust, signed by
every key the keyring holds (rotated-out ones too, so that a node that missed a rotation's
overlap can still follow it, since only a key it trusts can vouch for the next)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from registry.attestations.keyring import get_keyring
from signed_digests import provenance

CACHE_S = 30  # the bundle is public and anonymous: sign it at most this often, not per request
_cached: tuple[float, tuple, dict[str, Any]] | None = None
_lock = threading.Lock()


def trust_bundle() -> dict[str, Any]:
    global _cached
    keyring = get_keyring()
    version, held = keyring.held()
    now = datetime.now(UTC)
    listed = [key for key in held if key.not_after is None or key.not_after > now]
    shape = (version, tuple((k.key_id, k.not_after) for k in listed))
    with _lock:
        if _cached and _cached[1] == shape and time.monotonic() < _cached[0]:
            return _cached[2]
        document = {"version": version, "issued_at": now.isoformat(),
                    "keys": [key.as_bundle_item() for key in listed]}
        signed = provenance.envelope(provenance.BUNDLE_PAYLOAD, document, [
            (key.key_id, lambda message, kid=key.key_id: keyring.sign(kid, message)) for key in held])
        _cached = (time.monotonic() + CACHE_S, shape, signed)
        return signed


def own_keys() -> provenance.TrustBundle:
    """Every key the keyring holds, without ends of trust: whether the registry itself signed a
    stored envelope, whenever it did."""
    _, held = get_keyring().held()
    return provenance.TrustBundle(0, {
        key.key_id: provenance.TrustedKey(key.key_id, Ed25519PublicKey.from_public_bytes(key.public_key), None)
        for key in held}, {})
