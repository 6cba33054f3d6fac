"""Tokens `loraplane login` got, kept per registry in the user's config folder (mode 0600), and
used when LORAPLANE_TOKEN is not set. An expired one is never sent."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

MAX_FILE_BYTES = 1024 * 1024


def path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "loraplane" / "credentials.json"


def saved_token(registry_url: str) -> str | None:
    entry = _read().get(_key(registry_url))
    if not isinstance(entry, dict) or not isinstance(entry.get("token"), str):
        return None
    try:
        expires_at = datetime.fromisoformat(str(entry.get("expires_at")))
    except ValueError:
        return None
    if expires_at.tzinfo is None or expires_at <= datetime.now(UTC):
        return None
    return entry["token"]


def save(registry_url: str, token: str, expires_at: str, who: str) -> Path:
    entries = _read()
    entries[_key(registry_url)] = {"token": token, "expires_at": expires_at, "who": who}
    return _write(entries)


def forget(registry_url: str) -> bool:
    entries = _read()
    if entries.pop(_key(registry_url), None) is None:
        return False
    _write(entries)
    return True


def _write(entries: dict[str, Any]) -> Path:
    target = path()
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    staging = target.with_name(f".credentials.{os.getpid()}")
    staging.unlink(missing_ok=True)  # a leftover (or planted) file must not lend us its mode
    descriptor = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "w") as file:
        json.dump(entries, file, indent=2)
    os.replace(staging, target)  # whole or not at all
    return target


def _read() -> dict[str, Any]:
    try:
        with path().open("rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return {}
    if len(data) > MAX_FILE_BYTES:
        return {}
    try:
        entries = json.loads(data)
    except ValueError:
        return {}
    return entries if isinstance(entries, dict) else {}


def _key(registry_url: str) -> str:
    return registry_url.rstrip("/")
