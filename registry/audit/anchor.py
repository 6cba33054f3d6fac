"""The chain's head, kept outside the database. After each commit that added events, the registry
writes a signed head (the last event's id and hash, how many events the chain holds, and when) to
a file, and every webhook payload carries the same head. Someone holding the database credentials
can rewrite the chain, recompute its hashes, even truncate and rebuild it, but cannot move these
heads: `audit verify` finds the recorded head no longer in the chain, or the chain shorter than it."""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL, make_url

from registry import keys
from registry.keys import Purpose
from registry.settings import get_settings

log = logging.getLogger(__name__)
MAX_HEAD_BYTES = 4096  # a head is about 250 bytes; anything larger is not one


@dataclass(frozen=True)
class Head:
    last_id: int
    last_hash: str
    count: int
    at: str  # ISO 8601, UTC

    def signed(self) -> dict[str, Any]:
        body = asdict(self)
        return {**body, "signature": _signature(body)}


class UntrustedHead(Exception):
    """The head on file is unreadable or not signed with this deployment's audit-head key."""


def from_signed(document: Any) -> Head:
    if not isinstance(document, dict) or set(document) != {"last_id", "last_hash", "count", "at",
                                                           "signature"}:
        raise UntrustedHead("it is not a signed audit head")
    body = {k: v for k, v in document.items() if k != "signature"}
    if not (isinstance(body["last_id"], int) and isinstance(body["count"], int)
            and isinstance(body["last_hash"], str) and isinstance(body["at"], str)
            and isinstance(document["signature"], str)):
        raise UntrustedHead("it is not a signed audit head")
    if not keys.verifies(Purpose.AUDIT_HEAD, _message(body), document["signature"]):
        raise UntrustedHead("its signature does not match this deployment's audit-head key "
                            "(LORAPLANE_SECRET_KEY): it was forged or comes from another deployment")
    return Head(**body)


def _signature(body: dict[str, Any]) -> str:
    return keys.sign(Purpose.AUDIT_HEAD, _message(body))


def _message(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def head_path(database_url: URL | str) -> Path:
    """LORAPLANE_AUDIT_HEAD_FILE, or one file per database inside the data folder: a head belongs
    to one chain, and one machine may verify several databases."""
    configured = get_settings().audit_head_file
    if configured is not None:
        return configured
    identity = make_url(str(database_url)).set(password=None).render_as_string(hide_password=False)
    name = hashlib.sha256(identity.encode()).hexdigest()[:16]
    return get_settings().data_dir / "audit-heads" / f"{name}.json"


def read(path: Path) -> Head | None:
    """The head on file; None when there is none yet. Raises UntrustedHead."""
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_HEAD_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as error:  # a folder, or no permission: a setting to fix, never a crash
        raise UntrustedHead(f"it cannot be read ({error.strerror})") from None
    if len(raw) > MAX_HEAD_BYTES:
        raise UntrustedHead(f"it is larger than {MAX_HEAD_BYTES} bytes")
    try:
        document = json.loads(raw)
    except ValueError:
        raise UntrustedHead("it is not JSON") from None
    return from_signed(document)


def write(path: Path, head: Head) -> None:
    """Move the head on file forward to `head`. Never backwards, and never over a head that
    cannot be trusted: that file is the evidence an operator needs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # Processes sharing the file (the embedded default's registry and workers) take turns.
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            current = read(path)
        except UntrustedHead as problem:
            log.error("audit head %s left as it is: %s", path, problem)
            return
        if current is not None and current.last_id >= head.last_id:
            return  # a later commit's head is already there
        staging = path.with_name(f".{path.name}.{os.getpid()}")
        staging.write_text(json.dumps(head.signed(), sort_keys=True) + "\n")
        os.replace(staging, path)  # readers see the old head or the new one, never half of one
