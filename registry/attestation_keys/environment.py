"""Attestation keys from the environment: LORAPLANE_ATTESTATION_PRIVATE_KEY signs, and the keys it
replaced (LORAPLANE_ATTESTATION_PREVIOUS_PRIVATE_KEYS, newest first) stay held, so that what they
signed is recognised and re-signed, and so that the trust bundle is signed by them through their
overlap: a node pinned on the old bundle follows the rotation, as it does a folder keyring's.

The bundle's version and each previous key's end of trust cannot come from the environment (a
restart must not move them); the registry keeps them in the ledger (ledger.py) and hands them to
this keyring as it starts (`adopt`). Until then, a previous key is held but not announced."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from registry.attestation_keys.published import PublishedKey, RotationUnsupported, raw_public
from signed_digests.provenance import key_id

PEM_BLOCK = re.compile(r"-----BEGIN PRIVATE KEY-----[A-Za-z0-9+/=\s]{1,4096}?-----END PRIVATE KEY-----")
MAX_PREVIOUS_KEYS = 16
ENDED = datetime(1970, 1, 1, tzinfo=UTC)  # a previous key the ledger does not name: not announced


@dataclass(frozen=True)
class Ledger:
    """What a restart must not change: the bundle's version, the key that signs, and when each
    previous key's trust ends."""
    version: int
    current: str
    trust_ends: dict[str, datetime] = field(default_factory=dict)


class EnvironmentKeyring:
    def __init__(self, pem: bytes, previous_pems: bytes = b"") -> None:
        self._private = _ed25519(pem, "LORAPLANE_ATTESTATION_PRIVATE_KEY")
        self._id = key_id(raw_public(self._private.public_key()))
        blocks = PEM_BLOCK.findall(previous_pems.decode(errors="replace"))
        if len(blocks) > MAX_PREVIOUS_KEYS:
            raise ValueError(f"LORAPLANE_ATTESTATION_PREVIOUS_PRIVATE_KEYS holds {len(blocks)} keys; "
                             f"keep at most {MAX_PREVIOUS_KEYS}, dropping those whose trust has ended")
        if previous_pems.strip() and not blocks:
            raise ValueError("LORAPLANE_ATTESTATION_PREVIOUS_PRIVATE_KEYS holds no PKCS#8 PEM private "
                             "key (-----BEGIN PRIVATE KEY-----)")
        self._previous: dict[str, Ed25519PrivateKey] = {}
        for position, block in enumerate(blocks, 1):
            private = _ed25519(block.encode(), f"previous key {position} of "
                                               "LORAPLANE_ATTESTATION_PREVIOUS_PRIVATE_KEYS")
            kid = key_id(raw_public(private.public_key()))
            if kid != self._id:
                self._previous.setdefault(kid, private)
        self.ledger: Ledger | None = None

    def signing_key_id(self) -> str:
        return self._id

    def previous_key_ids(self) -> list[str]:
        """Newest first, as configured."""
        return list(self._previous)

    def sign(self, kid: str, message: bytes) -> bytes:
        return (self._private if kid == self._id else self._previous[kid]).sign(message)

    def held(self) -> tuple[int, list[PublishedKey]]:
        ledger = self.ledger or Ledger(1, self._id)
        keys = [PublishedKey(self._id, raw_public(self._private.public_key()), None)]
        keys += [PublishedKey(kid, raw_public(private.public_key()), ledger.trust_ends.get(kid, ENDED))
                 for kid, private in self._previous.items()]
        return ledger.version, keys

    def adopt(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def rotate(self, overlap: timedelta) -> str:
        raise RotationUnsupported("the attestation key comes from LORAPLANE_ATTESTATION_PRIVATE_KEY")


def _ed25519(pem: bytes, where: str) -> Ed25519PrivateKey:
    try:
        private = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as error:
        raise ValueError(f"{where} is not a PEM private key without a password ({error})") from None
    if not isinstance(private, Ed25519PrivateKey):
        raise ValueError(f"{where} must be an Ed25519 private key (PEM)")
    return private
