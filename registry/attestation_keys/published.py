"""What every keyring offers (`Keyring`) and the keys it publishes in the trust bundle."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from cryptography.hazmat.primitives import serialization

from signed_digests.provenance import ALGORITHM

# An emergency rotation ends the old key's trust at once; the bundle goes on naming that end,
# signed by the old key too, for this long, so that nodes pinned on it learn of it and obey.
EMERGENCY_NOTICE = timedelta(days=30)


@dataclass(frozen=True)
class PublishedKey:
    key_id: str
    public_key: bytes  # 32 raw bytes
    not_after: datetime | None
    emergency: bool = False  # its trust was ended at once, without an overlap

    def announced_at(self, when: datetime) -> bool:
        """Whether the trust bundle lists it at `when`: while trusted, and an emergency's end
        for EMERGENCY_NOTICE after it."""
        if self.not_after is None or self.not_after > when:
            return True
        return self.emergency and when - self.not_after < EMERGENCY_NOTICE

    def as_bundle_item(self) -> dict:
        return {"key_id": self.key_id, "algorithm": ALGORITHM,
                "public_key": base64.b64encode(self.public_key).decode(),
                "not_after": self.not_after.isoformat() if self.not_after else None}


class RotationUnsupported(Exception):
    """This keyring is rotated by its owner, not through the registry."""


class Keyring(Protocol):
    def signing_key_id(self) -> str: ...
    def sign(self, key_id: str, message: bytes) -> bytes: ...
    def held(self) -> tuple[int, list[PublishedKey]]:
        """(bundle version, every key it can sign with, rotated-out ones included). The version
        grows with every rotation."""
    def rotate(self, overlap: timedelta) -> str:
        """Make a new signing key; the current one stays trusted for `overlap` (zero: an
        emergency, its trust ends now). Returns the new key's id."""


def raw_public(public) -> bytes:
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
