"""Read a .zip, once its central directory has been walked under the limits.

`zipfile` reads the whole central directory into memory and makes an object per entry, however
many the end record claims: the uploader writes both, so a 9 MB file claiming 2 entries can hold
100,000. The directory is walked here first, entry header by entry header, with the very lookup
`zipfile` makes (its own functions), so both see the same directory.
"""

from __future__ import annotations

import stat
import struct
import zipfile
from typing import Any, BinaryIO

from registry.adapters.archive_entries import REBUILD_HINT, Entries, refuse_compression, refuse_link
from registry.errors import PayloadTooLarge

MAX_NAME_BYTES = 1024
MAX_EXTRA_BYTES = 16 * 1024  # an entry's extra field and comment together
ACCEPTED_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
METHOD_NAMES = {zipfile.ZIP_BZIP2: "bzip2", zipfile.ZIP_LZMA: "lzma"}
# zipfile's own end-record lookup and header layout, which its type stubs leave out (private).
zip_internals: Any = zipfile


def extract(file: BinaryIO, entries: Entries) -> None:
    _walk_central_directory(file, entries)
    with zipfile.ZipFile(file) as archive:
        wanted = []
        for info in archive.infolist():
            is_file = not info.is_dir()
            target = entries.admit(info.filename, info.file_size if is_file else 0, is_file=is_file)
            # Unix type bits live in the high half; zero means a plain entry from a non-Unix tool.
            if stat.S_IFMT(info.external_attr >> 16) not in (0, stat.S_IFREG, stat.S_IFDIR):
                raise refuse_link(entries.filename, info.filename)
            if is_file and info.compress_type not in ACCEPTED_METHODS:
                method = METHOD_NAMES.get(info.compress_type, f"method {info.compress_type}")
                raise refuse_compression(f"{entries.filename}:{info.filename[:200]}", method)
            if target is not None:
                wanted.append((info, target))
        for info, target in wanted:  # each is CRC-checked by zipfile as it is read
            with archive.open(info) as source:
                entries.copy(source, target, name=info.filename, size=info.file_size)


def _walk_central_directory(file: BinaryIO, entries: Entries) -> None:
    end = zip_internals._EndRecData(file)  # zipfile's own lookup: the same answer
    if not end:
        raise zipfile.BadZipFile("File is not a zip file")
    size = end[zip_internals._ECD_SIZE]
    start = end[zip_internals._ECD_LOCATION] - size
    if end[zip_internals._ECD_SIGNATURE] == zip_internals.stringEndArchive64:
        start -= zip_internals.sizeEndCentDir64 + zip_internals.sizeEndCentDir64Locator
    if start < 0:
        raise zipfile.BadZipFile("Bad offset for central directory")
    file.seek(start)
    walked = count = 0
    while walked < size:  # the loop zipfile runs, without keeping anything
        count += 1
        entries.check_count(count)
        header = file.read(zip_internals.sizeCentralDir)
        if len(header) != zip_internals.sizeCentralDir:
            raise zipfile.BadZipFile("Truncated central directory")
        fields = struct.unpack(zip_internals.structCentralDir, header)
        if fields[zip_internals._CD_SIGNATURE] != zip_internals.stringCentralDir:
            raise zipfile.BadZipFile("Bad magic number for central directory")
        name = fields[zip_internals._CD_FILENAME_LENGTH]
        extra = fields[zip_internals._CD_EXTRA_FIELD_LENGTH] + fields[zip_internals._CD_COMMENT_LENGTH]
        if name > MAX_NAME_BYTES or extra > MAX_EXTRA_BYTES:
            raise PayloadTooLarge(
                f"{entries.filename}: entry {count} has a {name}-byte name and {extra} bytes of extra "
                f"fields; the limits are {MAX_NAME_BYTES} and {MAX_EXTRA_BYTES}",
                code="archive_header_too_large", hint=REBUILD_HINT)
        file.seek(name + extra, 1)
        walked += zip_internals.sizeCentralDir + name + extra
    file.seek(0)
