"""The audit hash chain. Each event's hash covers its content and the hash before it, so an
edited row no longer matches its hash, and a removed row leaves the next one pointing at a hash
that is not there. This format is a contract: changing it breaks every stored chain."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

GENESIS = "0" * 64


def canonical_time(moment: datetime) -> str:
    # SQLite hands back naive datetimes; everything stored here is UTC.
    aware = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return aware.isoformat(timespec="microseconds")


def as_json(value: Any) -> Any:
    """The value exactly as the JSON column will hand it back."""
    return None if value is None else json.loads(json.dumps(value, default=str))


def event_hash(prev_hash: str, *, at: datetime, actor: str, action: str, subject: str,
               tenant_id: int | None, before: Any, after: Any) -> str:
    content = json.dumps(
        {"at": canonical_time(at), "actor": actor, "action": action, "subject": subject,
         "tenant_id": tenant_id, "before": before, "after": after},
        sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(f"{prev_hash}\n{content}".encode()).hexdigest()
