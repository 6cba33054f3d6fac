"""The lifecycle of a version and of an adapter. Retiring and deleting go through `retire` and
`delete` only; evaluations move a live version between validated, evaluating and evaluated
(evaluations/service.py) and never touch one that has ended.

validated | evaluating | evaluated -> retired   kept for the record: never promoted or evaluated again
validated | evaluating | evaluated -> deleted   its blobs are released (the row and audit trail stay)
retired -> deleted

An adapter is active, then retired (no new version; each of its versions retired), then deleted
(each of its versions deleted). Its name is never used again: served names must not be reused.
"""

from __future__ import annotations

from datetime import datetime

from registry.errors import Conflict
from registry.tables import Adapter, AdapterVersion

RETIRED, DELETED = "retired", "deleted"
ENDED = frozenset({RETIRED, DELETED})  # what evaluations leave alone
ACTIVE = "active"  # an adapter neither retired nor deleted
ADAPTER_STATES = (ACTIVE, RETIRED, DELETED)


def retire(version: AdapterVersion, at: datetime) -> bool:
    """Whether it changed: retiring a retired or deleted version changes nothing."""
    if version.state in ENDED:
        return False
    version.state, version.retired_at = RETIRED, at
    return True


def delete(version: AdapterVersion, at: datetime) -> bool:
    """Whether it changed. The caller releases the blobs (lifecycle.py)."""
    if version.state == DELETED:
        return False
    if version.retired_at is None:
        version.retired_at = at
    version.state, version.deleted_at = DELETED, at
    return True


def retire_adapter(adapter: Adapter, at: datetime) -> bool:
    if adapter.state != ACTIVE:
        return False
    adapter.state, adapter.retired_at = RETIRED, at
    return True


def delete_adapter(adapter: Adapter, at: datetime) -> bool:
    if adapter.state == DELETED:
        return False
    if adapter.retired_at is None:
        adapter.retired_at = at
    adapter.state, adapter.deleted_at = DELETED, at
    return True


def require_live(version: AdapterVersion, served_name: str, doing: str) -> None:
    """Refuse to promote or evaluate a version that has ended."""
    if version.state in ENDED:
        raise Conflict(f"{served_name} is {version.state} and cannot be {doing}",
                       code=f"version_{version.state}",
                       hint="Retired and deleted versions are kept for the record only; upload a "
                            "new version (loraplane push) and use that.")


def require_open(adapter: Adapter, ref: str) -> None:
    """Refuse a new version of an adapter that has been retired or deleted."""
    if adapter.state != ACTIVE:
        raise Conflict(f"adapter {ref} is {adapter.state}: it takes no new versions",
                       code=f"adapter_{adapter.state}",
                       hint="Its served names are never reused; upload under a new adapter name.")
