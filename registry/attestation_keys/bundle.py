"""The trust bundle: the public keys still trusted, each with the end of its trust, signed by
every key it lists and by no other. A rotated-out key signs it through its overlap only, so a
node follows a rotation during the overlap; one that missed it entirely is re-pinned by its
operator. A key whose trust an emergency rotation ended at once stays listed, with that end and
signing, for keyring.EMERGENCY_NOTICE: a node pinned on it takes that bundle and from then on
refuses whatever the key signs."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from registry.attestation_keys.keyring import get_keyring
from signed_digests import provenance

CACHE_S = 30  # the bundle is public and anonymous: sign it at most this often, not per request
_cached: tuple[float, tuple, dict[str, Any]] | None = None
_lock = threading.Lock()


def trust_bundle() -> dict[str, Any]:
    global _cached
    keyring = get_keyring()
    version, held = keyring.held()
    now = datetime.now(UTC)
    listed = [key for key in held if key.announced_at(now)]
    shape = (version, tuple((k.key_id, k.not_after) for k in listed))
    with _lock:
        if _cached and _cached[1] == shape and time.monotonic() < _cached[0]:
            return _cached[2]
        document = {"version": version, "issued_at": now.isoformat(),
                    "keys": [key.as_bundle_item() for key in listed]}
        signed = provenance.envelope(provenance.BUNDLE_PAYLOAD, document, [
            (key.key_id, lambda message, kid=key.key_id: keyring.sign(kid, message)) for key in listed])
        _cached = (time.monotonic() + CACHE_S, shape, signed)
        return signed


def own_keys() -> provenance.TrustBundle:
    """Every key the keyring holds, without ends of trust: whether the registry itself signed a
    stored envelope, whenever it did."""
    _, held = get_keyring().held()
    return provenance.TrustBundle(0, {
        key.key_id: provenance.TrustedKey(key.key_id, Ed25519PublicKey.from_public_bytes(key.public_key), None)
        for key in held}, {})
