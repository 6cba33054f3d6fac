"""The sha256 of every file in a folder, showing progress while large folders are hashed."""

from __future__ import annotations

import os
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TimeElapsedColumn

from signed_digests.digests import file_sha256

PROGRESS_FROM_BYTES = 32 * 1024 * 1024  # smaller folders hash in well under a second


def hash_folder(folder: Path, *, show_progress: bool = True) -> dict[str, str]:
    """Relative path (with '/') -> sha256 of each file under `folder`, hidden ones included:
    whatever sits in a folder that vLLM loads from is part of what it may read."""
    paths = sorted(_files(folder))
    total = sum(path.stat().st_size for path in paths)
    hashes = {}
    with Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=True,
                  disable=not show_progress or total < PROGRESS_FROM_BYTES) as progress:
        task = progress.add_task("hashing", total=total)
        for path in paths:
            name = path.relative_to(folder).as_posix()
            progress.update(task, description=f"hashing {name}")
            hashes[name] = file_sha256(path)
            progress.advance(task, path.stat().st_size)
    return hashes


def _files(folder: Path):
    # Symlinked folders are not followed: a link out of the folder is not the folder's content.
    for root, _, names in os.walk(folder):
        for name in names:
            path = Path(root) / name
            if path.is_file():
                yield path
