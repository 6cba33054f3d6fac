"""Unpack a .tar.gz / .tar / .zip of a PEFT folder safely: no traversal, links or bombs.

Every limit holds while the archive is read, before anything expands: the entry count, the
declared sizes, each header's size and the bytes that really come out. The readers live in
tar_reader and zip_reader; what they check entry by entry, in archive_entries.
"""

from __future__ import annotations

import struct
import tarfile
import zipfile
import zlib
from pathlib import Path
from typing import BinaryIO

from registry.adapters import tar_reader, zip_reader
from registry.adapters.archive_entries import REBUILD_HINT, Entries, refuse_compression, refuse_pickle
from registry.adapters.archive_streams import compression_of
from registry.errors import BadRequest

__all__ = ["ARCHIVE_SUFFIXES", "extract", "is_archive", "refuse_pickle"]

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")
# What a damaged or exotic archive can raise while it is read. LookupError: tarfile indexes
# into a truncated sparse header without checking its length.
ARCHIVE_ERRORS = (tarfile.TarError, zipfile.BadZipFile, zlib.error, EOFError, OSError, RuntimeError,
                  NotImplementedError, ValueError, LookupError, struct.error)


def is_archive(filename: str) -> bool:
    return filename.lower().endswith(ARCHIVE_SUFFIXES)


def extract(archive: BinaryIO, filename: str, workdir: Path, *, max_bytes: int,
            max_files: int) -> dict[str, Path]:
    """Return the paths of the PEFT files found in the archive, extracted into workdir."""
    entries = Entries(filename, workdir, max_bytes=max_bytes, max_entries=max_files)
    try:
        if filename.lower().endswith(".zip"):
            zip_reader.extract(archive, entries)
        else:
            compression = compression_of(archive.read(8))
            archive.seek(0)
            if compression not in (None, "gzip"):
                raise refuse_compression(filename, compression)
            tar_reader.extract(archive, entries, gzipped=compression == "gzip")
    except ARCHIVE_ERRORS as error:
        raise BadRequest(f"{filename} is not a readable archive ({type(error).__name__}: "
                         f"{str(error)[:200]})", code="invalid_archive", hint=REBUILD_HINT) from None
    return entries.extracted
