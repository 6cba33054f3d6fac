"""The keys this node believes, and how that belief may change.

Either an operator manages the trust bundle as a file (read at start and again whenever it
changes: the operator's word is final), or the node pins the first bundle its registry publishes
and from then on takes a newer one only when a key it already trusts signed it and its version is
not older (`TrustBundle.parse(new, trusted_by=pinned)`). The registry's database and web server
are therefore trusted once, at the node's first start, and never again: a registry that later
publishes keys of its own choosing is refused."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from signed_digests.provenance import MAX_ENVELOPE_BYTES, TrustBundle, Unverified

log = logging.getLogger(__name__)
Fetch = Callable[[], Awaitable[dict[str, Any]]]


class TrustStore:
    def __init__(self, *, pinned: Path, operator_file: Path | None, fetch: Fetch) -> None:
        self.pinned_path, self.operator_file, self._fetch = pinned, operator_file, fetch
        self.bundle: TrustBundle | None = None
        self.problem: str | None = None  # why the bundle was last not taken, for the logs
        self.pin_damaged = False  # the operator's to repair: never re-pinned silently
        self._operator_stamp: tuple[int, int, int] | None = None
        self._lock = asyncio.Lock()

    def load(self) -> None:
        """What is on disk: the operator's file, else the pinned copy."""
        if self.operator_file is not None:
            self._read_operator_file(self.operator_file)
            return
        try:
            saved = _read_json(self.pinned_path)
        except FileNotFoundError:
            return
        except (OSError, ValueError) as error:
            self._damaged(f"cannot be read ({error})")
            return
        try:
            self.bundle = TrustBundle.parse(saved)
        except Unverified as error:
            self._damaged(f"does not verify ({error})")

    def _damaged(self, why: str) -> None:
        self.pin_damaged = True
        self.problem = f"the pinned trust bundle {why}"
        log.error("the pinned trust bundle %s %s: nothing is trusted until an operator repairs or "
                  "removes it", self.pinned_path, why)

    async def refresh(self) -> bool:
        """Take a newer bundle if one is allowed; True when the trusted keys changed. Raises
        RegistryUnavailable when the registry's bundle cannot be fetched."""
        async with self._lock:
            if self.operator_file is not None:
                return self._read_operator_file(self.operator_file)
            if self.pin_damaged:
                return False
            try:
                published = await self._fetch()
            except Exception as error:
                self.problem = f"the registry's trust bundle could not be fetched: {error}"
                raise
            return self._take(published)

    def _take(self, published: dict[str, Any]) -> bool:
        try:
            fresh = TrustBundle.parse(published, trusted_by=self.bundle)
        except Unverified as error:
            problem = f"refused the registry's trust bundle: {error}"
            if self.problem != problem:
                log.error("%s", problem)
            self.problem = problem
            return False
        self.problem = None
        if self.bundle is not None and _same(fresh, self.bundle):
            return False  # signed again (the registry stamps each answer), saying the same
        first = self.bundle is None
        try:
            _write_json(self.pinned_path, fresh.raw)
        except OSError as error:  # trusted now all the same: it verified; pinned again next time
            log.warning("could not pin the trust bundle to %s: %s", self.pinned_path, error)
        self.bundle = fresh
        if first:
            log.warning("pinned the registry's trust bundle (version %d, keys %s) on first use; "
                        "set LORAPLANE_AGENT_TRUST_BUNDLE to a file checked out of band to trust "
                        "no registry answer at all", fresh.version, _ids(fresh))
        else:
            log.info("trust bundle version %d (keys %s)", fresh.version, _ids(fresh))
        return True

    def _read_operator_file(self, path: Path) -> bool:
        try:
            info = path.stat()
            stamp = (info.st_ino, info.st_size, info.st_mtime_ns)
            if stamp == self._operator_stamp:
                return False
            self._operator_stamp = stamp
            fresh = TrustBundle.parse(_read_json(path))
        except (OSError, ValueError, Unverified) as error:
            if self.problem != str(error):
                log.error("the trust bundle file %s cannot be used (%s); keeping what was trusted "
                          "before", path, error)
            self.problem = str(error)
            return False
        self.problem = None
        changed = self.bundle is None or not _same(fresh, self.bundle)
        self.bundle = fresh
        if changed:
            log.info("trust bundle version %d from %s (keys %s)", fresh.version, path, _ids(fresh))
        return changed


def _read_json(path: Path) -> Any:
    with path.open("rb") as file:
        data = file.read(MAX_ENVELOPE_BYTES + 1)
    if len(data) > MAX_ENVELOPE_BYTES:
        raise ValueError("larger than 512 KiB")
    return json.loads(data)


def _write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_suffix(f".{os.getpid()}.tmp")
    staging.write_text(json.dumps(value))
    os.replace(staging, path)  # whole or not at all


def _same(one: TrustBundle, other: TrustBundle) -> bool:
    """The same trust: version, keys and the end of each key's trust."""
    return one.version == other.version and \
        {k: v.not_after for k, v in one.keys.items()} == {k: v.not_after for k, v in other.keys.items()}


def _ids(bundle: TrustBundle) -> str:
    return ", ".join(k[:16] + "…" for k in sorted(bundle.keys))
