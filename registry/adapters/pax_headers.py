"""Pax extended headers, read in one linear pass instead of by tarfile.

tarfile finds pax records with regexes that backtrack quadratically over runs of digits
(CVE-2024-6232, fixed in Python 3.11.10 and 3.12.6): a 467-byte .tar.gz holding three 64 KiB
pax headers of '1's kept one upload busy for 27 s with the GIL held, so every other request
waited too. Whatever the Python version, tarfile never parses a pax header here: `parse` reads
its records strictly, and `apply` hands them to the next entry the way tarfile's `_proc_pax`
does, without the GNU sparse formats, which are refused (tar_reader refuses sparse files).
"""

from __future__ import annotations

import re
import tarfile

MAX_RECORDS = 32  # a real entry carries a handful: path, size, times, a few xattrs
# Values that become numbers; tarfile would turn anything else into 0 without a word. Bounded
# repeats, not nested: these match in linear time.
_WHOLE, _TIME = re.compile(rb"[0-9]{1,20}"), re.compile(rb"-?[0-9]{1,20}(?:\.[0-9]{1,20})?")
NUMBER_VALUES = {"size": _WHOLE, "uid": _WHOLE, "gid": _WHOLE,
                 "mtime": _TIME, "atime": _TIME, "ctime": _TIME}


class MalformedPax(ValueError):
    pass


def parse(payload: bytes) -> list[tuple[str, bytes]]:
    """The (keyword, value) records of a pax header: each "%d %s=%s\\n", its length counting the
    whole record. Anything else, or more than MAX_RECORDS, is malformed. Trailing NULs are padding."""
    records: list[tuple[str, bytes]] = []
    max_digits, pos = len(str(len(payload))), 0
    while pos < len(payload) and payload[pos] != 0:
        number = len(records) + 1
        if number > MAX_RECORDS:
            raise MalformedPax(f"more than {MAX_RECORDS} records")
        space = payload.find(b" ", pos, pos + max_digits + 1)
        digits = payload[pos:space] if space > pos else b""
        if not digits.isdigit() or not digits.isascii():
            raise MalformedPax(f"record {number} does not start with its length and a space")
        length, end = int(digits), pos + int(digits)
        if end > len(payload) or end <= space + 3 or payload[end - 1] != ord("\n"):
            raise MalformedPax(f"record {number} says it is {length} bytes long, which does not "
                               "end it at a newline inside the header")
        keyword, equals, value = payload[space + 1:end - 1].partition(b"=")
        records.append((_keyword(keyword, equals, number), value))
        pos = end
    if payload[pos:].strip(b"\0"):
        raise MalformedPax("bytes after the NUL padding")
    for name, value in records:
        _check_number(name, value)
    return records


def apply(header: tarfile.TarInfo, tar: tarfile.TarFile, records: list[tuple[str, bytes]]
          ) -> tarfile.TarInfo:
    """Read the entry these records describe and return it with them applied, as tarfile does.

    A global header (XGLTYPE) applies to every entry that follows, through tar.pax_headers."""
    # tarfile keeps a dict, which a global header updates in place; its stub says Mapping.
    headers: dict[str, str] = tar.pax_headers  # type: ignore[assignment]
    values = headers if header.type == tarfile.XGLTYPE else headers.copy()
    for keyword, value in records:
        if keyword == "hdrcharset":
            values[keyword] = value.decode("utf-8", "replace")
    # Names may be raw bytes in the archive's encoding when hdrcharset says BINARY.
    encoding = tar.encoding if values.get("hdrcharset") == "BINARY" else "utf-8"
    for keyword, value in records:
        if keyword in tarfile.PAX_NAME_FIELDS:
            values[keyword] = _decode(value, encoding, tar.encoding, tar)
        else:
            values[keyword] = _decode(value, "utf-8", "utf-8", tar)
    try:
        entry = header.fromtarfile(tar)
    except tarfile.HeaderError as error:  # a pax header must be followed by its entry
        raise tarfile.SubsequentHeaderError(str(error)) from None  # type: ignore[attr-defined]  # not in the stub
    if header.type in (tarfile.XHDTYPE, tarfile.SOLARIS_XHDTYPE):
        entry._apply_pax_info(values, tar.encoding, tar.errors)  # type: ignore[attr-defined]  # private: not in the stub
        entry.offset = header.offset
        if "size" in values:  # the data is as long as the pax size says: find the next header
            offset = entry.offset_data
            if entry.isreg() or entry.type not in tarfile.SUPPORTED_TYPES:
                offset += entry._block(entry.size)  # type: ignore[attr-defined]  # private: not in the stub
            tar.offset = offset
    return entry


def sparse_name(records: list[tuple[str, bytes]]) -> str | None:
    """The name a GNU sparse file gives itself in pax records; None when there is no sparse file."""
    keys = {keyword: value for keyword, value in records if keyword.startswith("GNU.sparse.")}
    if not keys:
        return None
    return keys.get("GNU.sparse.name", b"a sparse file").decode("utf-8", "replace")


def _keyword(keyword: bytes, equals: bytes, number: int) -> str:
    try:
        text = keyword.decode("utf-8")
    except UnicodeDecodeError:
        text = ""
    if not equals or not text or not text.isprintable() or " " in text:
        raise MalformedPax(f"record {number} has no keyword=value")
    return text


def _check_number(keyword: str, value: bytes) -> None:
    pattern = NUMBER_VALUES.get(keyword)
    if pattern is not None and not pattern.fullmatch(value):
        raise MalformedPax(f"{keyword} is {value[:40]!r}, which is not a decimal number")


def _decode(value: bytes, encoding: str, fallback: str, tar: tarfile.TarFile) -> str:
    """As tarfile decodes a pax value: strictly first, then as the archive's errors allow."""
    try:
        return value.decode(encoding, "strict")
    except UnicodeDecodeError:
        return value.decode(fallback, tar.errors)
