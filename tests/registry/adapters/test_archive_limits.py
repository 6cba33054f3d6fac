"""Archives that used to slip past the limits are refused, with their exact reason, storing nothing.

Here each is small enough to be harmless; tests/registry/test_hostile_inputs.py sends the full
sized ones to a memory-capped registry and bounds its memory.
"""

from __future__ import annotations

import io
import json
import tarfile

import pytest

from bench.hostile_corpus import Adapter, Attack
from bench.hostile_corpus import archives as ar
from tests.support.asserts import assert_refused

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def adapter(make_adapter, base_model) -> Adapter:
    folder = make_adapter(seed=3)
    return Adapter(json.loads((folder / "adapter_config.json").read_text()),
                   (folder / "adapter_model.safetensors").read_bytes())


CASES = [
    # (id, attack(adapter), status, code, message)
    ("gnu_long_name", lambda a: ar.tar_long_name(70_000, "gnu", "gzip"), 413, "archive_header_too_large",
     "a.tar.gz: a long-name or pax header of 70000 bytes exceeds the limit of 4096"),
    ("pax_long_path", lambda a: ar.tar_long_name(70_000, "pax", "none"), 413, "archive_header_too_large",
     "a.tar: a long-name or pax header of 70000 bytes exceeds the limit of 4096"),
    ("chain_of_long_names", lambda a: ar.tar_header_chain(200, "gzip"), 413, "archive_header_too_large",
     "a.tar.gz: the headers of one entry are longer than 45056 bytes"),
    # A sparse file in pax records is refused before its map (in the entry's data) is read.
    ("sparse_map_in_pax", lambda a: ar.tar_sparse_map(100_000, "gzip"), 400, "archive_link",
     "a.tar.gz: member 'sparse' is a link or special file"),
    # CVE-2024-6232: tarfile's pax regexes backtrack quadratically over digits. These three 64 KiB
    # headers of '1's (under 1 kB gzipped) used to take 27 s with the GIL held.
    ("pax_digits_64k", lambda a: ar.tar_pax_digits(65_536, 3, "gzip"), 413, "archive_header_too_large",
     "a.tar.gz: a long-name or pax header of 65536 bytes exceeds the limit of 4096"),
    # Under the size limit, they are not pax records at all: refused unparsed by tarfile.
    ("pax_digits_4k", lambda a: ar.tar_pax_digits(4096, 16, "gzip"), 400, "invalid_pax_header",
     "a.tar.gz: malformed pax header: record 1 does not start with its length and a space"),
    ("pax_record_length_lies", lambda a: ar.tar_pax_payload(b"9 path=abcdefgh\n", "none"), 400,
     "invalid_pax_header", "a.tar: malformed pax header: record 1 says it is 9 bytes long, which does "
     "not end it at a newline inside the header"),
    ("pax_too_many_records", lambda a: ar.tar_pax_payload(
        b"".join(b"10 a=%04d\n" % n for n in range(33)), "none"), 400, "invalid_pax_header",
     "a.tar: malformed pax header: more than 32 records"),
    ("pax_size_not_a_number", lambda a: ar.tar_pax_payload(b"14 size=-5000\n", "none"), 400,
     "invalid_pax_header", "a.tar: malformed pax header: size is b'-5000', which is not a decimal number"),
    ("old_gnu_sparse", lambda a: ar.tar_old_sparse(1, "gzip"), 400, "archive_link",
     "member 'sparse' is a link or special file"),
    ("zeros_after_the_end", lambda a: ar.tar_trailing(a, 2 * MiB, "gzip"), 400, "archive_trailing_data",
     "a.tar.gz continues for more than 1048576 bytes after its end-of-archive marker"),
    ("garbage_after_gzip", lambda a: ar.tar_after_gzip(a, "garbage"), 400, "archive_trailing_data",
     "a.tar.gz holds more bytes after its gzip stream"),
    ("second_gzip_member", lambda a: ar.tar_after_gzip(a, "second_member"), 400, "archive_trailing_data",
     "a.tar.gz holds more bytes after its gzip stream"),
    ("bzip2_tar", lambda a: ar.tar_trailing(a, 0, "bzip2"), 415, "unsupported_compression",
     "a.tar.gz is compressed with bzip2; only gzip (.tar.gz, .tgz) and zip's deflate are accepted"),
    ("xz_tar", lambda a: ar.tar_trailing(a, 0, "xz"), 415, "unsupported_compression",
     "a.tgz is compressed with xz"),
    ("device_node", lambda a: ar.tar_special(a, "chrdev", "gzip"), 400, "archive_link", "'tty'"),
    ("bzip2_zip_member", lambda a: ar.zip_method(a, 12), 415, "unsupported_compression",
     "a.zip:adapter_config.json is compressed with bzip2"),
    ("lzma_zip_member", lambda a: ar.zip_method(a, 14), 415, "unsupported_compression",
     "a.zip:adapter_config.json is compressed with lzma"),
    ("zip_name_too_long", lambda a: ar.zip_long_fields(2000, 0), 413, "archive_header_too_large",
     "a.zip: entry 1 has a 2000-byte name and 0 bytes of extra fields; the limits are 1024 and 16384"),
    ("zip_directory_longer_than_claimed", lambda a: ar.zip_directory(1000, 2), 413, "too_many_files",
     "a.zip holds more than 16 entries"),
    ("zip_directory_size_lie", lambda a: ar.zip_special(a, "zip64_lie"), 400, "invalid_archive",
     "Bad offset for central directory"),
]


@pytest.mark.parametrize(("attack", "status", "code", "message"), [case[1:] for case in CASES],
                         ids=[case[0] for case in CASES])
def test_archive_past_a_limit_is_refused(uploader, adapter, stored_state, attack, status, code, message):
    before = stored_state()
    sent: Attack = attack(adapter)

    response = uploader.post("/v1/adapters/acme/refused/versions", content=sent.body,
                             headers={"Content-Type": sent.content_type})

    assert_refused(response, status, code, message)
    assert response.json()["error"]["hint"]
    assert stored_state() == before
    assert uploader.get("/readyz").status_code == 200


def pax_tar(adapter: Adapter) -> bytes:
    """The adapter as GNU tar --format=posix and git archive write it: a global pax header, and
    per-entry records (a long path, fractional times, a binary xattr), read without tarfile."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT,
                      pax_headers={"comment": "0123456789abcdef" * 2}) as tar:
        for name, data in adapter.files():
            info = tarfile.TarInfo(f"{'d' * 120}/{name}")
            info.size, info.mtime = len(data), 1_700_000_000.25
            info.pax_headers = {"SCHILY.xattr.user.origin": "ü" * 10, "atime": "1700000000.5"}
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_a_valid_archive_still_uploads(uploader, adapter):
    """Guards the table: the same adapter as a .tar.gz, a .tar, a pax .tar and a .zip is accepted:
    the first creates the version, and each other packing of the same files is that version."""
    answers = []
    for name, packed in (("a.tar.gz", ar.compress([ar.adapter_tar(adapter)], "gzip")),
                         ("a.tar", ar.adapter_tar(adapter)), ("pax.tar", pax_tar(adapter)),
                         ("a.zip", ar.zip_of(adapter.files()))):
        answers.append(uploader.post("/v1/adapters/acme/archived/versions", files=[("file", (name, packed))]))
    assert [a.status_code for a in answers] == [201, 200, 200, 200], [a.text for a in answers]
    assert len({(a.json()["number"], a.json()["digest"]) for a in answers}) == 1
