"""Whether a cached folder still holds exactly the bytes that were verified.

The node's disk is not trusted to stay as it was left (DESIGN.md, "Trust model"), so:
- a verified folder is sealed read-only (files 0444, the folder 0555): nothing writes there by
  mistake, and changing a file takes a deliberate chmod first;
- before every load the agent makes, every file is hashed again against the attested manifest
  (`rehash`); nothing else may be in the folder, and every file must be a plain file (a link
  could be pointed elsewhere later without changing anything here);
- while vLLM holds an adapter (it reloads from the folder after evicting it, without asking),
  each pass compares a stat `fingerprint` taken at verification: inode, size, mtime and ctime of
  every entry. Replacing, writing, renaming or chmod-ing a file changes its ctime, which an
  unprivileged user cannot set back, so any change leads to a full re-hash."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from serving.agent.entries import ArtifactFile

COMPLETE = ".complete"  # the marker a finished download leaves; not part of the manifest
NOTHING = "nothing"
Fingerprint = tuple[tuple[str, int, int, int, int, int], ...]


class Tampered(Exception):
    """A cached file is not the one verified: replaced, changed, added or removed since."""

    def __init__(self, file: str, expected: str, found: str) -> None:
        super().__init__(file, expected, found)
        self.file, self.expected, self.found = file, expected, found

    def __str__(self) -> str:
        if self.expected == NOTHING:
            return f"{self.file} appeared in the cached folder after it was verified"
        return (f"{self.file} changed on the node's disk after it was verified: sha256 "
                f"{_short(self.expected)} approved, {_short(self.found)} found")


def fingerprint(folder: Path) -> Fingerprint:
    """What any change to the folder's entries changes (OSError when it cannot be read)."""
    found = []
    with os.scandir(folder) as entries:
        for item in entries:
            info = item.stat(follow_symlinks=False)
            found.append((item.name, info.st_mode, info.st_ino, info.st_size, info.st_mtime_ns,
                          info.st_ctime_ns))
    return tuple(sorted(found))


def rehash(folder: Path, files: Iterable[ArtifactFile]) -> None:
    """Raises Tampered unless the folder holds exactly `files`, byte for byte."""
    files = list(files)
    expected_names = {spec.name for spec in files} | {COMPLETE}
    extra = sorted(set(os.listdir(folder)) - expected_names)
    if extra:
        raise Tampered(extra[0], NOTHING, "a file")
    for spec in files:
        found = _sha256(folder / spec.name, spec.size)
        if found != spec.sha256:
            raise Tampered(spec.name, spec.sha256, found)


def seal(folder: Path) -> None:
    """Read-only, as far as the mode bits go (the owner may still chmod, hence the fingerprint)."""
    for item in folder.iterdir():
        if item.is_file() and not item.is_symlink() and stat.S_IMODE(item.stat().st_mode) != 0o444:
            item.chmod(0o444)
    if stat.S_IMODE(folder.stat().st_mode) != 0o555:
        folder.chmod(0o555)


def unseal(folder: Path) -> None:
    """Writable again, so that its files can be removed."""
    if folder.is_dir() and not folder.is_symlink():
        folder.chmod(0o755)


def _sha256(path: Path, size: int) -> str:
    """The file's sha256, or what stands in its place instead of a plain file of `size` bytes
    (checked first: a huge or sparse file put there is never read)."""
    try:
        # O_NOFOLLOW: a link is refused, not followed; O_NONBLOCK: a FIFO must not hang the check.
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return NOTHING
    except OSError as error:
        return "a link" if error.errno == errno.ELOOP else f"an unreadable file ({error.strerror})"
    with os.fdopen(descriptor, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            return "not a plain file"
        if info.st_size != size:
            return f"a file of {info.st_size} bytes, not {size}"
        return hashlib.file_digest(file, "sha256").hexdigest()


def _short(value: str) -> str:
    return value[:12] + "…" if len(value) == 64 else value
