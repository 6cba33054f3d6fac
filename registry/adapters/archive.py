"""Unpack a .tar.gz / .tar / .zip of a PEFT folder safely: no traversal, links or bombs."""

from __future__ import annotations

import stat
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


@dataclass(frozen=True)
class Member:
    name: str
    size: int
    is_file: bool


def is_archive(filename: str) -> bool:
    return filename.lower().endswith(ARCHIVE_SUFFIXES)


def refuse_pickle(filename: str) -> None:
    if filename.lower().endswith(PICKLE_SUFFIXES):
        raise UnsupportedMediaType(
            f"{filename}: pickled weights are refused, because loading them can run arbitrary code",
            code="pickle_refused",
            hint="Save with safe_serialization=True to get adapter_model.safetensors.",
        )


def extract(archive: BinaryIO, filename: str, workdir: Path, *, max_bytes: int, max_files: int) -> dict[str, Path]:
    """Return the paths of the PEFT files found in the archive, extracted into workdir."""
    reader = _ZipReader(archive, filename) if filename.lower().endswith(".zip") else _TarReader(archive, filename)
    members = reader.members()
    wanted = _check_members(members, filename, max_bytes=max_bytes, max_files=max_files)
    extracted = {}
    for base_name, member in wanted.items():
        target = workdir / base_name
        try:
            with reader.open(member.name) as source, open(target, "wb") as sink:
                _copy_bounded(source, sink, limit=member.size, label=f"{filename}:{member.name}")
        except (zipfile.BadZipFile, zlib.error, tarfile.TarError, EOFError) as error:
            raise BadRequest(f"{filename} is corrupt ({error})", code="invalid_archive", hint=REBUILD_HINT) from None
        extracted[base_name] = target
    return extracted


def _check_members(members: list[Member], filename: str, *, max_bytes: int, max_files: int) -> dict[str, Member]:
    files = [m for m in members if m.is_file]
    if len(files) > max_files:
        raise PayloadTooLarge(f"{filename} holds {len(files)} files; the limit is {max_files}",
                              code="too_many_files", hint="Archive only the PEFT adapter folder.")
    total = sum(m.size for m in files)
    if total > max_bytes:
        raise PayloadTooLarge(
            f"{filename} expands to {total} bytes; the limit is {max_bytes}",
            code="archive_too_large", hint="Archive only the PEFT adapter folder.",
        )
    wanted: dict[str, Member] = {}
    for member in files:
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
        raise BadRequest(f"{filename}: member {name!r} has an absolute path or '..'",
                         code="unsafe_archive_path", hint="Archive the folder with relative paths.")


def _refuse_link(name: str, filename: str) -> BadRequest:
    return BadRequest(f"{filename}: member {name!r} is a link or special file", code="archive_link",
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
        try:
            self.tar = tarfile.open(fileobj=archive, mode="r:*")
        except (tarfile.TarError, EOFError, OSError) as error:
            raise BadRequest(f"{filename} is not a readable tar archive ({error})",
                             code="invalid_archive", hint=REBUILD_HINT) from None

    def members(self) -> list[Member]:
        result = []
        try:
            for info in self.tar:
                _check_name(info.name, self.filename)
                if not (info.isfile() or info.isdir()):
                    raise _refuse_link(info.name, self.filename)
                result.append(Member(info.name, info.size, info.isfile()))
        except (tarfile.TarError, EOFError, OSError) as error:
            raise BadRequest(f"{self.filename} is corrupt ({error})", code="invalid_archive", hint=REBUILD_HINT) from None
        return result

    def open(self, name: str):
        return self.tar.extractfile(name)


class _ZipReader:
    def __init__(self, archive: BinaryIO, filename: str) -> None:
        self.filename = filename
        try:
            self.zip = zipfile.ZipFile(archive)
        except (zipfile.BadZipFile, OSError) as error:
            raise BadRequest(f"{filename} is not a readable zip archive ({error})",
                             code="invalid_archive", hint=REBUILD_HINT) from None

    def members(self) -> list[Member]:
        result = []
        for info in self.zip.infolist():
            _check_name(info.filename, self.filename)
            # Unix type bits live in the high half; zero means a plain entry from a non-Unix tool.
            if stat.S_IFMT(info.external_attr >> 16) not in (0, stat.S_IFREG, stat.S_IFDIR):
                raise _refuse_link(info.filename, self.filename)
            result.append(Member(info.filename, info.file_size, not info.is_dir()))
        return result

    def open(self, name: str):
        return self.zip.open(name)


