"""Keys, trust bundles and attestations for the agent's fast tests, built with the same
signed_digests.provenance functions the registry signs with, so what the agent checks here is the
format it gets in production."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from signed_digests import provenance


class Key:
    def __init__(self) -> None:
        self.private = Ed25519PrivateKey.generate()
        self.raw = self.private.public_key().public_bytes(serialization.Encoding.Raw,
                                                          serialization.PublicFormat.Raw)
        self.key_id = provenance.key_id(self.raw)

    def signer(self) -> tuple[str, Any]:
        return self.key_id, self.private.sign


REGISTRY_KEY = Key()  # the key every stand-in entry is signed with unless a test says otherwise


def bundle(*keys: Key, version: int = 1, not_after: dict[str, datetime] | None = None,
           signed_by: tuple[Key, ...] | None = None) -> dict[str, Any]:
    """A trust bundle listing `keys`, signed by each of them (or by `signed_by`)."""
    ends = {kid: when.isoformat() for kid, when in (not_after or {}).items()}
    listed = [{"key_id": k.key_id, "algorithm": provenance.ALGORITHM,
               "public_key": base64.b64encode(k.raw).decode(), "not_after": ends.get(k.key_id)}
              for k in keys]
    document = {"version": version, "issued_at": datetime.now(UTC).isoformat(), "keys": listed}
    return provenance.envelope(provenance.BUNDLE_PAYLOAD, document,
                               [k.signer() for k in (signed_by or keys)])


def attest(entry: dict[str, Any], *, pool: str, key: Key = REGISTRY_KEY,
           **changes: Any) -> dict[str, Any]:
    """The registry's approval of `entry` for `pool`; `changes` override what it states (served
    name, digest, files, predicate) to make one that is about other bytes."""
    served_name = changes.get("served_name", entry["served_name"])
    files = changes.get("files", [{"name": f["name"], "sha256": f["sha256"]} for f in entry["files"]])
    predicate = {"action": "approve", "pool": pool, "served_name": served_name, "alias": "production",
                 **changes.get("predicate", {})}
    document = provenance.statement(served_name, changes.get("digest", entry["digest"]), files, predicate)
    return provenance.envelope(provenance.IN_TOTO_PAYLOAD, document, [key.signer()])


def sign_set(pool: str, entries: list[Any], generation: int, *, key: Key = REGISTRY_KEY,
             pool_id: int = 1) -> dict[str, Any]:
    """The pool's signed active set naming `entries` (whatever they hold), as the registry signs
    it: each as a production alias of its own adapter."""
    aliases = [{"adapter_id": i, "alias": "production", "version_id": i, "weight": None, "promotion_id": None,
                "served_name": e.get("served_name"), "digest": e.get("digest")}
               for i, e in enumerate(entries) if isinstance(e, dict)]
    document = {"_type": provenance.ACTIVE_SET_TYPE, "pool": pool, "pool_id": pool_id, "generation": generation,
                "aliases": aliases, "retiring": [], "signed_at": datetime.now(UTC).isoformat()}
    return provenance.envelope(provenance.ACTIVE_SET_PAYLOAD, document, [key.signer()])
