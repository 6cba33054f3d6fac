"""Read a .tar or .tar.gz in one pass, and extract the PEFT files as they go by.

`tarfile` reads in stream mode through a Meter, so nothing is ever read twice or seeked back
to, and every byte it asks for is counted first. The header of each entry, with everything
`tarfile` reads to complete it (GNU long names, pax records, sparse maps), has a budget: an
uploader's header can say it is gigabytes long, and `tarfile` would read it whole into memory.
Pax headers are parsed by pax_headers, never by `tarfile`, whose regexes take quadratic time.
"""

from __future__ import annotations

import tarfile
from typing import BinaryIO

from registry.adapters import pax_headers
from registry.adapters.archive_entries import REBUILD_HINT, Entries, refuse_link, too_large
from registry.adapters.archive_streams import INPUT_CHUNK, GzipReader, Meter
from registry.errors import BadRequest, PayloadTooLarge

EXTENDED_TYPES = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE,
                  tarfile.SOLARIS_XHDTYPE)
# A long name is one path, and a pax header a few short records; an adapter's file names are short.
EXTENDED_HEADER_BYTES = 4 * 1024
PAX_TYPES = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)
# All that is read to complete one entry's header; tarfile reads ahead a record at a time.
HEADER_BYTES = EXTENDED_HEADER_BYTES + 4 * tarfile.RECORDSIZE
TRAILING_BYTES = 1024 * 1024  # after the end marker tar pads to its record size, 10 KiB by default


def extract(file: BinaryIO, entries: Entries, *, gzipped: bool) -> None:
    filename = entries.filename
    source: GzipReader | BinaryIO = GzipReader(file) if gzipped else file
    limit = entries.max_bytes + (entries.max_entries + 2) * (HEADER_BYTES + tarfile.BLOCKSIZE) + TRAILING_BYTES
    meter = Meter(source, limit, lambda: too_large(filename, entries.max_bytes))
    # Stream mode ("r|") only reads its file; the stub asks for a seekable, writable one.
    with tarfile.open(fileobj=meter, mode="r|",  # type: ignore[call-overload]
                      tarinfo=_metered_tarinfo(meter, filename)) as tar:
        for info in tar:
            target = entries.admit(info.name, info.size if info.isfile() else 0, is_file=info.isfile())
            if not (info.isfile() or info.isdir()) or info.sparse is not None:
                raise refuse_link(filename, info.name)
            if target is not None:
                entries.copy(tar.extractfile(info), target, name=info.name, size=info.size)
    if isinstance(source, GzipReader):  # gzipped: read to the end, so its checksum is verified too
        _check_end(meter, source, filename)


def _metered_tarinfo(meter: Meter, filename: str) -> type[tarfile.TarInfo]:
    def header_too_large(size: int | None = None) -> PayloadTooLarge:
        message = (f"a long-name or pax header of {size} bytes exceeds the limit of {EXTENDED_HEADER_BYTES}"
                   if size is not None else f"the headers of one entry are longer than {HEADER_BYTES} bytes")
        return PayloadTooLarge(f"{filename}: {message}", code="archive_header_too_large", hint=REBUILD_HINT)

    class MeteredTarInfo(tarfile.TarInfo):
        def _proc_member(self, tar: tarfile.TarFile):
            # tarfile's entry point for subclasses; it runs before the rest of a header is read.
            if self.type in EXTENDED_TYPES and self.size > EXTENDED_HEADER_BYTES:
                raise header_too_large(self.size)
            with meter.phase(HEADER_BYTES, header_too_large):
                if self.type in PAX_TYPES:
                    return self._proc_checked_pax(tar)
                return super()._proc_member(tar)  # type: ignore[misc]  # private: not in the stub

        def _proc_checked_pax(self, tar: tarfile.TarFile):
            payload = tar.fileobj.read(self._block(self.size))[:self.size]  # type: ignore[attr-defined]  # private: not in the stub
            if len(payload) < self.size:
                raise tarfile.ReadError("unexpected end of data in a pax header")
            try:
                records = pax_headers.parse(payload)
            except pax_headers.MalformedPax as error:
                raise BadRequest(f"{filename}: malformed pax header: {error}", code="invalid_pax_header",
                                 hint=REBUILD_HINT) from None
            entry = pax_headers.apply(self, tar, records)
            sparse = pax_headers.sparse_name(records)
            if sparse is not None:
                raise refuse_link(filename, sparse)
            return entry

    return MeteredTarInfo


def _check_end(meter: Meter, source: GzipReader, filename: str) -> None:
    left = TRAILING_BYTES
    while chunk := meter.read(INPUT_CHUNK):
        left -= len(chunk)
        if left < 0:
            raise BadRequest(f"{filename} continues for more than {TRAILING_BYTES} bytes after its "
                             "end-of-archive marker", code="archive_trailing_data", hint=REBUILD_HINT)
    if not source.only_padding_follows():
        raise BadRequest(f"{filename} holds more bytes after its gzip stream", code="archive_trailing_data",
                         hint=REBUILD_HINT)
