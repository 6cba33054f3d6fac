"""sha256 of files and of a version's manifest: shared by the CLI, the registry and the agent."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def manifest_digest(files: list[dict]) -> str:
    """A version's digest: the sha256 of its manifest ({name, sha256, size} per file) as canonical
    JSON, so the same files always give the same digest however they were packaged."""
    canonical = json.dumps(files, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(canonical).hexdigest()


def file_sha256(path: Path) -> str:
    sha = hashlib.sha256()
    with Path(path).open("rb") as file:
        while chunk := file.read(1024 * 1024):
            sha.update(chunk)
    return sha.hexdigest()
