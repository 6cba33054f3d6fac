"""The node's adapter cache: `<cache>/<digest>/` holds a version's files, downloaded from their
presigned URLs, every sha256 verified, then renamed into place in one step, so vLLM never sees
a partial folder. Least recently used folders are evicted past a size cap, except those vLLM may
still read: it reloads from that path after evicting an adapter itself."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

import httpx

from loraplane.digests import manifest_digest

SAFE_FILE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
COMPLETE = ".complete"
CHUNK = 1024 * 1024


class DigestMismatch(Exception):
    """The bytes are not the approved ones. Never loaded; not fetched again for a while."""


class DownloadFailed(Exception):
    """The store could not be reached or refused: worth retrying soon."""


class AdapterCache:
    def __init__(self, root: Path, max_bytes: int, timeout_s: float) -> None:
        self.root, self.max_bytes, self.timeout_s = root, max_bytes, timeout_s
        root.mkdir(parents=True, exist_ok=True)
        for partial in root.glob(".partial-*"):  # left by a download the agent was killed in
            shutil.rmtree(partial, ignore_errors=True)

    def owns(self, path: str) -> bool:
        """Whether vLLM was pointed into this cache (by this agent, now or before a restart)."""
        return Path(path).parent == self.root

    def digest_at(self, path: str) -> str | None:
        """The digest of a complete folder of this cache, or None for any other path."""
        folder = Path(path)
        return folder.name if self.owns(path) and (folder / COMPLETE).exists() else None

    async def ensure(self, entry: dict[str, Any]) -> Path:
        folder = self.root / entry["digest"]
        if (folder / COMPLETE).exists():
            os.utime(folder)  # most recently used
            return folder
        return await asyncio.to_thread(self._download, entry, folder)

    def _download(self, entry: dict[str, Any], folder: Path) -> Path:
        files = entry["files"]
        manifest = [{"name": f["name"], "sha256": f["sha256"], "size": f["size"]} for f in files]
        if manifest_digest(manifest) != entry["digest"] or not all(SAFE_FILE.match(f["name"]) for f in files):
            raise DigestMismatch(f"the file list of {entry['served_name']} does not match its digest "
                                 f"{entry['digest'][:12]}")
        staging = self.root / f".partial-{entry['digest']}-{uuid.uuid4().hex[:8]}"
        staging.mkdir()
        try:
            with httpx.Client(timeout=self.timeout_s, follow_redirects=False) as http:
                for spec in files:
                    self._fetch(http, spec, staging / spec["name"], entry["served_name"])
            (staging / COMPLETE).touch()
            try:
                staging.rename(folder)
            except OSError:  # another pass finished the same digest first
                if not (folder / COMPLETE).exists():
                    raise
            return folder
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    @staticmethod
    def _fetch(http: httpx.Client, spec: dict[str, Any], path: Path, served_name: str) -> None:
        sha, size = hashlib.sha256(), 0
        try:
            with http.stream("GET", spec["url"]) as response, path.open("wb") as out:
                if response.status_code != 200:
                    raise DownloadFailed(f"{spec['name']} of {served_name}: the store answered "
                                         f"HTTP {response.status_code}")
                for chunk in response.iter_bytes(CHUNK):
                    size += len(chunk)
                    if size > spec["size"]:
                        break
                    sha.update(chunk)
                    out.write(chunk)
        except httpx.HTTPError as error:
            raise DownloadFailed(f"{spec['name']} of {served_name}: {type(error).__name__}") from error
        if size != spec["size"] or sha.hexdigest() != spec["sha256"]:
            raise DigestMismatch(f"sha256 mismatch for {spec['name']} of {served_name}: expected "
                                 f"{spec['sha256'][:12]}…, the store sent other bytes")

    def evict(self, pinned: set[str]) -> list[str]:
        """Drop least recently used folders past the cap; never one in `pinned`."""
        folders = [f for f in self.root.iterdir() if f.is_dir() and not f.name.startswith(".")]
        sizes = {f: sum(p.stat().st_size for p in f.iterdir()) for f in folders}
        total, evicted = sum(sizes.values()), []
        for folder in sorted(folders, key=lambda f: f.stat().st_mtime):
            if total <= self.max_bytes:
                break
            if folder.name in pinned:
                continue
            shutil.rmtree(folder, ignore_errors=True)
            total -= sizes[folder]
            evicted.append(folder.name)
        return evicted

