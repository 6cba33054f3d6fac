"""Unpack a .tar.gz / .tar / .zip of a PEFT folder safely: no traversal, links or bombs.

Limits are enforced while the archive is read, before anything expands: the entry count and
the declared sizes are checked entry by entry, and the bytes that really come out are counted.
"""

from __future__ import annotations

import lzma
import stat
import struct
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from registry.errors import BadRequest, PayloadTooLarge, UnsupportedMediaType

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
WANTED = ("adapter_config.json", "adapter_model.safetensors")
REBUILD_HINT = "Re-create the archive of the PEFT folder (tar czf adapter.tgz DIR, or zip -r)."
SLIM_HINT = "Archive only the PEFT adapter folder."
# What a damaged or exotic archive can raise while it is read.
ARCHIVE_ERRORS = (tarfile.TarError, zipfile.BadZipFile, zlib.error, lzma.LZMAError, EOFError, OSError,
                  RuntimeError, NotImplementedError, ValueError, struct.error)


@dataclass(frozen=True)
class Member:
    name: str
    size: int
    ref: object  # the reader's own handle for the entry


def is_archive(filename: str) -> bool:
    return filename.lower().endswith(ARCHIVE_SUFFIXES)


def refuse_pickle(filename: str) -> None:
    if filename.lower().endswith(PICKLE_SUFFIXES):
        raise UnsupportedMediaType(
            f"{filename}: pickled weights are refused, because loading them can run arbitrary code",
            code="pickle_refused",
            hint="Save with safe_serialization=True to get adapter_model.safetensors.",
        )


def extract(archive: BinaryIO, filename: str, workdir: Path, *, max_bytes: int,
            max_files: int) -> dict[str, Path]:
    """Return the paths of the PEFT files found in the archive, extracted into workdir."""
    try:
        reader = (_ZipReader if filename.lower().endswith(".zip") else _TarReader)(archive, filename)
        budget = _Budget(filename, max_bytes=max_bytes, max_entries=max_files)
        wanted = _wanted(reader.members(budget), filename)
        extracted = {}
        for base_name, member in wanted.items():
            target = workdir / base_name
            with reader.open(member) as source, open(target, "wb") as sink:
                _copy_bounded(source, sink, limit=member.size, label=f"{filename}:{member.name}")
            extracted[base_name] = target
        reader.verify_rest()
    except ARCHIVE_ERRORS as error:
        raise BadRequest(f"{filename} is not a readable archive ({type(error).__name__}: "
                         f"{str(error)[:200]})", code="invalid_archive", hint=REBUILD_HINT) from None
    return extracted


class _Budget:
    """Counts entries and declared bytes as they are listed, and refuses past the limits."""

    def __init__(self, filename: str, *, max_bytes: int, max_entries: int) -> None:
        self.filename, self.max_bytes, self.max_entries = filename, max_bytes, max_entries
        self.entries = self.bytes = 0

    def admit(self, name: str, size: int) -> None:
        _check_name(name, self.filename)
        self.entries += 1
        self.bytes += size
        self.check_entries(self.entries)
        if self.bytes > self.max_bytes:
            raise PayloadTooLarge(f"{self.filename} expands to more than {self.max_bytes} bytes; "
                                  f"the limit is {self.max_bytes}",
                                  code="archive_too_large", hint=SLIM_HINT)


    def check_entries(self, count: int) -> None:
        if count > self.max_entries:
            raise PayloadTooLarge(f"{self.filename} holds more than {self.max_entries} entries",
                                  code="too_many_files", hint=SLIM_HINT)


def _wanted(members: list[Member], filename: str) -> dict[str, Member]:
    wanted: dict[str, Member] = {}
    for member in members:
        path = PurePosixPath(member.name)
        refuse_pickle(member.name)
        if path.name in WANTED and len(path.parts) <= 2:
            if path.name in wanted:
                raise BadRequest(f"{filename} holds more than one {path.name}", code="ambiguous_archive",
                                 hint="Archive exactly one PEFT adapter folder.")
            wanted[path.name] = member
    return wanted


def _check_name(name: str, filename: str) -> None:
    parts = PurePosixPath(name.replace("\\", "/")).parts
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":") or ".." in parts:
        raise BadRequest(f"{filename}: member {name[:200]!r} has an absolute path or '..'",
                         code="unsafe_archive_path", hint="Archive the folder with relative paths.")


def _refuse_link(name: str, filename: str) -> BadRequest:
    return BadRequest(f"{filename}: member {name[:200]!r} is a link or special file", code="archive_link",
                      hint="Archive plain files only (tar --dereference).")


def _copy_bounded(source: BinaryIO, sink: BinaryIO, *, limit: int, label: str) -> None:
    # Headers can lie about sizes; count what really comes out.
    copied = 0
    while chunk := source.read(1024 * 1024):
        copied += len(chunk)
        if copied > limit:
            raise PayloadTooLarge(f"{label} expands beyond its declared size", code="archive_too_large",
                                  hint=REBUILD_HINT)
        sink.write(chunk)


class _TarReader:
    def __init__(self, archive: BinaryIO, filename: str) -> None:
        self.filename = filename
        self.tar = tarfile.open(fileobj=archive, mode="r:*")

    def members(self, budget: _Budget) -> list[Member]:
        files = []
        for info in self.tar:  # one header at a time: a refusal comes before the next expands
            budget.admit(info.name, info.size if info.isfile() else 0)
            if info.isfile():
                files.append(Member(info.name, info.size, info))
            elif not info.isdir():
                raise _refuse_link(info.name, self.filename)
        return files

    def open(self, member: Member):
        return self.tar.extractfile(member.ref)

    def verify_rest(self) -> None:
        # Read to the end, so a compressed stream's own checksum is verified too.
        while self.tar.fileobj.read(1024 * 1024):
            pass


class _ZipReader:
    def __init__(self, archive: BinaryIO, filename: str) -> None:
        self.filename = filename
        self.archive = archive
        self.zip: zipfile.ZipFile | None = None

    def members(self, budget: _Budget) -> list[Member]:
        budget.check_entries(_zip_entry_count(self.archive))  # before zipfile lists them all
        self.zip = zipfile.ZipFile(self.archive)
        files = []
        for info in self.zip.infolist():
            budget.admit(info.filename, 0 if info.is_dir() else info.file_size)
            # Unix type bits live in the high half; zero means a plain entry from a non-Unix tool.
            if stat.S_IFMT(info.external_attr >> 16) not in (0, stat.S_IFREG, stat.S_IFDIR):
                raise _refuse_link(info.filename, self.filename)
            if not info.is_dir():
                files.append(Member(info.filename, info.file_size, info))
        return files

    def open(self, member: Member):
        return self.zip.open(member.ref)

    def verify_rest(self) -> None:
        """Each extracted zip entry is CRC-checked as it is read; nothing else to verify."""


def _zip_entry_count(archive: BinaryIO) -> int:
    """Total entries, from the end-of-central-directory record (the last 64 KiB of the file)."""
    archive.seek(0, 2)
    size = archive.tell()
    archive.seek(max(0, size - 65_557))
    tail = archive.read()
    archive.seek(0)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or at + 22 > len(tail):
        raise zipfile.BadZipFile("no end-of-central-directory record")
    return struct.unpack("<H", tail[at + 10: at + 12])[0]
