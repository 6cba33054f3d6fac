"""The node's adapter cache: `<cache>/<digest>/` holds a version's files, downloaded from their
presigned URLs, every sha256 verified, then renamed into place in one step, so vLLM never sees
a partial folder, and sealed read-only. Least recently used folders are evicted past a size cap,
except those vLLM may still read: it reloads from that path after evicting an adapter itself.

A cached folder is hashed again before every load from it, and checked by its fingerprint at
every pass while vLLM holds it (integrity.py): bytes changed on the disk are never loaded again.

The disk is not trusted to stay as it was left: a download the agent died in, a folder half
deleted, or a file where a folder belongs are removed before they are used, at start and before
each download; and a disk error while storing one version fails that version only."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import shutil
import uuid
from pathlib import Path

import httpx

from serving.agent import integrity, metrics
from serving.agent.entries import DIGEST, ArtifactFile, Entry
from serving.agent.integrity import COMPLETE, Fingerprint
from signed_digests.digests import manifest_digest

DIGEST_NAME = re.compile(DIGEST)
PARTIAL = ".partial-"
CHUNK = 1024 * 1024
log = logging.getLogger(__name__)


class DigestMismatch(Exception):
    """The bytes are not the approved ones. Never loaded; not fetched again for a while."""


class DownloadFailed(Exception):
    """The store could not be reached or refused: worth retrying soon."""


class FolderChanged(Exception):
    """A folder vLLM holds changed after it was verified (whatever its bytes are now)."""


class CacheUnwritable(Exception):
    """The node's disk could not take the files (full, a file too large, a folder in the way)."""


class AdapterCache:
    def __init__(self, root: Path, max_bytes: int, timeout_s: float) -> None:
        self.root, self.max_bytes, self.timeout_s = root, max_bytes, timeout_s
        # digest -> the folder's fingerprint when its bytes were last verified, this process
        self.fingerprints: dict[str, Fingerprint] = {}
        root.mkdir(parents=True, exist_ok=True)
        for leftover in root.iterdir():  # a download the agent was killed in, a folder half deleted
            if leftover.name.startswith(PARTIAL) or (DIGEST_NAME.fullmatch(leftover.name)
                                                     and not _complete(leftover)):
                _remove(leftover)

    def owns(self, path: str) -> bool:
        """Whether vLLM was pointed into this cache (by this agent, now or before a restart)."""
        folder = Path(path)
        return folder.parent == self.root and DIGEST_NAME.fullmatch(folder.name) is not None

    def digest_at(self, path: str) -> str | None:
        """The digest of a complete folder of this cache, or None for any other path."""
        folder = Path(path)
        return folder.name if self.owns(path) and _complete(folder) else None

    async def ensure(self, entry: Entry) -> Path:
        """The folder to load `entry` from: downloaded and verified now, or cached and hashed again
        now. Raises Tampered (folder left as found) when the cached bytes are not the approved
        ones; the caller decides what to do about it, then may discard() and ask again."""
        folder = self.root / entry.digest  # a checked digest: 64 hex characters, never a path
        try:
            if _complete(folder):
                await asyncio.to_thread(self._verify, entry, folder)
                os.utime(folder)  # most recently used
                return folder
            return await asyncio.to_thread(self._download, entry, folder)
        except OSError as error:
            raise CacheUnwritable(f"the node's cache could not store {entry.served_name}: "
                                  f"{error.strerror or type(error).__name__}") from error

    async def check_loaded(self, entry: Entry) -> None:
        """For a folder vLLM holds and may reload from at any time: unchanged since it was
        verified (fingerprint). Raises FolderChanged when it changed: vLLM may have reloaded
        from it meanwhile, even if the bytes are back as they were. A folder this process has
        not verified yet (adopted after a restart) is verified in full now (raises Tampered)."""
        folder = self.root / entry.digest
        known = self.fingerprints.get(entry.digest)
        if known is None:
            await asyncio.to_thread(self._verify, entry, folder)
        elif not self.unchanged(entry):
            raise FolderChanged(f"the cached folder of {entry.served_name} changed while vLLM held "
                                "it; unloaded, to be loaded again once its bytes verify")

    def unchanged(self, entry: Entry) -> bool:
        """Whether the folder is exactly as it was when its bytes were last verified."""
        try:
            return integrity.fingerprint(self.root / entry.digest) == self.fingerprints.get(entry.digest)
        except OSError:
            return False

    def discard(self, digest: str) -> None:
        self.fingerprints.pop(digest, None)
        _remove(self.root / digest)

    def _verify(self, entry: Entry, folder: Path) -> None:
        """Hash every file again; remember the fingerprint the bytes were verified under, unless
        the folder changed while it was being hashed (then the next check hashes it again)."""
        self.fingerprints.pop(entry.digest, None)
        try:
            integrity.seal(folder)
            before = integrity.fingerprint(folder)
        except OSError:
            before = None
        integrity.rehash(folder, entry.files)
        if before is not None and integrity.fingerprint(folder) == before:
            self.fingerprints[entry.digest] = before

    def _download(self, entry: Entry, folder: Path) -> Path:
        if manifest_digest(entry.manifest()) != entry.digest:
            raise DigestMismatch(f"the file list of {entry.served_name} does not match its digest "
                                 f"{entry.digest[:12]}")
        staging = self.root / f"{PARTIAL}{entry.digest}-{uuid.uuid4().hex[:8]}"
        metrics.DOWNLOADS.inc()
        try:
            staging.mkdir()
            with httpx.Client(timeout=self.timeout_s, follow_redirects=False) as http:
                for spec in entry.files:
                    self._fetch(http, spec, staging / spec.name, entry.served_name)
            (staging / COMPLETE).touch()
            if not _complete(folder):
                _remove(folder)  # half deleted, or not a folder at all: never loaded from
            try:
                staging.rename(folder)
            except OSError:  # another pass finished the same digest first
                if not _complete(folder):
                    raise
            # Hashed as they arrived, but the staging folder was writable meanwhile: sealed, then
            # hashed once more, so the fingerprint later checks compare with is of verified bytes.
            self._verify(entry, folder)
            return folder
        finally:
            _remove(staging)

    @staticmethod
    def _fetch(http: httpx.Client, spec: ArtifactFile, path: Path, served_name: str) -> None:
        sha, size = hashlib.sha256(), 0
        try:
            with http.stream("GET", spec.url) as response, path.open("wb") as out:
                if response.status_code != 200:
                    raise DownloadFailed(f"{spec.name} of {served_name}: the store answered "
                                         f"HTTP {response.status_code}")
                for chunk in response.iter_bytes(CHUNK):
                    size += len(chunk)
                    if size > spec.size:
                        break
                    sha.update(chunk)
                    out.write(chunk)
        except httpx.HTTPError as error:
            raise DownloadFailed(f"{spec.name} of {served_name}: {type(error).__name__}") from error
        if size != spec.size or sha.hexdigest() != spec.sha256:
            raise DigestMismatch(f"sha256 mismatch for {spec.name} of {served_name}: expected "
                                 f"{spec.sha256[:12]}…, the store sent other bytes")

    def evict(self, pinned: set[str]) -> list[str]:
        """Drop least recently used folders past the cap; never one in `pinned`. A folder that
        changes under it (removed by hand, say) is left for the next pass."""
        usage = {}
        for folder in self.root.iterdir():
            if DIGEST_NAME.fullmatch(folder.name) and (stats := _usage(folder)):
                usage[folder] = stats
        total, evicted = sum(size for size, _ in usage.values()), []
        for folder, (size, _) in sorted(usage.items(), key=lambda item: item[1][1]):
            if total <= self.max_bytes:
                break
            if folder.name in pinned:
                continue
            self.discard(folder.name)
            total -= size
            evicted.append(folder.name)
        return evicted


def _complete(folder: Path) -> bool:
    return folder.is_dir() and not folder.is_symlink() and (folder / COMPLETE).is_file()


def _usage(folder: Path) -> tuple[int, float] | None:
    """(bytes, last used) of a cache folder, or None when it cannot be read."""
    try:
        return sum(p.stat().st_size for p in folder.iterdir()), folder.stat().st_mtime
    except OSError:
        return None


def _remove(path: Path) -> None:
    """Whatever is at `path`: a folder, a file or a link (never what a link points to)."""
    try:
        if path.is_dir() and not path.is_symlink():
            integrity.unseal(path)  # a sealed folder's entries cannot be removed
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    except OSError as error:
        log.warning("could not remove %s from the cache: %s", path.name, error)

