"""The audit hash chain. Each event's hash covers its content and the hash before it, so an
edited row no longer matches its hash, and a removed row leaves the next one pointing at a hash
that is not there. This format is a contract: changing it breaks every stored chain.

Two schemes share the format. `sha256` (the events written before migration 0006) is a plain
digest that anyone with database access can recompute. `hmac-sha256` keys the same digest with
the deployment's audit-chain key, so a chain rewritten without that key no longer verifies."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime
from typing import Any

GENESIS = "0" * 64
SHA256 = "sha256"
HMAC_SHA256 = "hmac-sha256"
SCHEMES = (SHA256, HMAC_SHA256)


def canonical_time(moment: datetime) -> str:
    # SQLite hands back naive datetimes; everything stored here is UTC.
    aware = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return aware.isoformat(timespec="microseconds")


def as_json(value: Any) -> Any:
    """The value exactly as the JSON column will hand it back."""
    return None if value is None else json.loads(json.dumps(value, default=str))


def event_hash(prev_hash: str, *, at: datetime, actor: str, action: str, subject: str,
               tenant_id: int | None, before: Any, after: Any, key: bytes | None = None) -> str:
    """The `sha256` scheme without `key`, the `hmac-sha256` scheme with it."""
    content = json.dumps(
        {"at": canonical_time(at), "actor": actor, "action": action, "subject": subject,
         "tenant_id": tenant_id, "before": before, "after": after},
        sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    message = f"{prev_hash}\n{content}".encode()
    if key is None:
        return hashlib.sha256(message).hexdigest()
    return hmac.new(key, message, hashlib.sha256).hexdigest()
