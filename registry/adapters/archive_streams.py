"""The byte streams an archive is read through: a bounded gzip decompressor, and a meter.

`tarfile` reads through them, so every byte it asks for is counted before it sees it:
decompression stops at a limit instead of running on, and the bytes read while one header
is parsed (long names, pax records, sparse maps) have a budget of their own.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from contextlib import contextmanager
from typing import BinaryIO

INPUT_CHUNK = 64 * 1024
# Other compressions `tarfile` would open by itself; none of them is accepted.
OTHER_COMPRESSIONS = {b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd",
                      b"\x1f\x9d": "compress (.Z)"}
GZIP_MAGIC = b"\x1f\x8b"


def compression_of(head: bytes) -> str | None:
    """The compression the first bytes of a file announce; None for none."""
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    return next((name for magic, name in OTHER_COMPRESSIONS.items() if head.startswith(magic)), None)


class GzipReader:
    """Decompresses one gzip member, never more than a read asks for.

    After the member (its CRC and length verified by zlib), only zero padding may follow:
    a second member or other bytes would be decompressed or ignored by other tools.
    """

    def __init__(self, file: BinaryIO) -> None:
        self.file = file
        self.inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)

    def read(self, size: int) -> bytes:
        while size > 0 and not self.inflater.eof:
            data = self.inflater.unconsumed_tail or self.file.read(INPUT_CHUNK)
            if not data:
                raise EOFError("the gzip stream ends before its end marker")
            out = self.inflater.decompress(data, size)
            if out:
                return out
        return b""

    def only_padding_follows(self) -> bool:
        rest = self.inflater.unused_data
        while rest:
            if rest.strip(b"\0"):
                return False
            rest = self.file.read(INPUT_CHUNK)
        return True


class Meter:
    """Counts the bytes read from a stream. Refuses past `limit` in all, and past a phase's own
    limit while a phase is open."""

    def __init__(self, source, limit: int, too_large: Callable[[], Exception]) -> None:
        self.source, self.limit, self.too_large = source, limit, too_large
        self.total = 0
        self.phase_left: int | None = None
        self.phase_error: Callable[[], Exception] = too_large  # a phase's own, while one is open

    def read(self, size: int = -1) -> bytes:
        data = self.source.read(size if size >= 0 else INPUT_CHUNK)
        self.total += len(data)
        if self.total > self.limit:
            raise self.too_large()
        if self.phase_left is not None:
            self.phase_left -= len(data)
            if self.phase_left < 0:
                raise self.phase_error()
        return data

    @contextmanager
    def phase(self, limit: int, error: Callable[[], Exception]):
        """Bound the bytes read inside; a phase opened within another one is part of it."""
        if self.phase_left is not None:
            yield
            return
        self.phase_left, self.phase_error = limit, error
        try:
            yield
        finally:
            self.phase_left, self.phase_error = None, self.too_large
