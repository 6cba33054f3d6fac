"""The artifact cache the engine loads from: one folder per version digest, verified by sha256.

The engine reads adapters by path, and may reload one from that path whenever it evicted it, so
the folder must stay put while the adapter is loaded. Folders appear whole (built beside, then
renamed), and every use re-checks the hashes, so a damaged cache is refetched, never served.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from registry.adapters.artifact import blob_key
from registry.storage.base import ArtifactStore
from signed_digests.digests import manifest_digest


class ArtifactCorrupt(Exception):
    pass


def fetch(store: ArtifactStore, cache_dir: Path, digest: str, files: list[dict]) -> Path:
    """The folder of `digest`'s files, each verified; raises ArtifactCorrupt when the manifest
    does not make the digest (the row was changed) or a file is not its sha256."""
    if manifest_digest(files) != digest:
        raise ArtifactCorrupt(f"the manifest of {digest} does not make that digest: the version's "
                              "stored files were changed")
    cache_dir.mkdir(parents=True, exist_ok=True)
    target = cache_dir / digest
    if target.is_dir():
        if _intact(target, files):
            return target
        shutil.rmtree(target, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{digest[:12]}-", dir=cache_dir))
    try:
        for entry in files:
            store.get_file(blob_key(entry["sha256"]), staging / entry["name"])
        if not _intact(staging, files):
            raise ArtifactCorrupt(f"the stored artifact of {digest} does not match its manifest")
        staging.chmod(0o755)  # the engine may run as another user
        for path in staging.iterdir():
            path.chmod(0o644)
        try:
            os.replace(staging, target)
        except OSError:
            if not (target.is_dir() and _intact(target, files)):  # not a concurrent fetch's result
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _intact(folder: Path, files: list[dict]) -> bool:
    for entry in files:
        path = folder / entry["name"]
        if not path.is_file() or path.stat().st_size != entry["size"]:
            return False
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1024 * 1024), b""):
                digest.update(chunk)
        if digest.hexdigest() != entry["sha256"]:
            return False
    return True
