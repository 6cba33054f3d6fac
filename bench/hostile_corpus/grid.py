"""A fixed grid of attacks from every family, for the benchmark: the same inputs on every run."""

from __future__ import annotations

import zipfile

from bench.hostile_corpus import Attack
from bench.hostile_corpus import archives as ar
from bench.hostile_corpus import documents as doc
from bench.hostile_corpus import multipart_attacks as mp
from bench.hostile_corpus.adapter import Adapter

MiB = 1024 * 1024
# Pax headers that are not "%d %s=%s\n" records: each one tarfile would have parsed by regex.
PAX_PAYLOADS = (b"1" * 4000 + b" ", b"12 path=abc\n", b"9 path=abcdefgh\n", b"5 =x\n",
                b"".join(b"10 a=%04d\n" % n for n in range(33)), b"14 size=-5000\n", b"12 path=abc\nX")


def grid(adapter: Adapter, *, max_upload_bytes: int, max_files: int) -> list[Attack]:
    """Attacks sized for a registry with these limits; each name is distinct."""
    under = max_upload_bytes - MiB  # room for the multipart framing
    attacks = [
        *(ar.tar_long_name(size, kind, "gzip") for size in (70_000, 8 * MiB, 150_000_000)
          for kind in ("gnu", "pax")),
        *(ar.tar_long_name(size, "gnu", "none") for size in (70_000, under // 2)),
        *(ar.tar_header_chain(count, how) for count in (100, 5000) for how in ("gzip", "none")),
        *(ar.tar_sparse_map(entries, "gzip") for entries in (10, 1_000_000)),
        *(ar.tar_pax_digits(size, entries, "gzip") for size, entries in ((65_536, 3), (4096, max_files))),
        *(ar.tar_pax_payload(payload, "none") for payload in PAX_PAYLOADS),
        *(ar.tar_old_sparse(blocks, "gzip") for blocks in (1, 100_000)),
        *(ar.tar_trailing(adapter, size, "gzip") for size in (2 * MiB, 64 * MiB, 512 * MiB)),
        ar.tar_trailing(adapter, 2 * MiB, "gzip", b"\x5a"),
        *(ar.tar_trailing(adapter, size, how) for size in (0, 16 * MiB) for how in ("bzip2", "xz")),
        *(ar.tar_after_gzip(adapter, extra) for extra in ("garbage", "second_member", "zero_then_garbage")),
        *(ar.tar_bomb(declared, how) for declared in (max_upload_bytes + 1, 2**33 - 1) for how in ("gzip", "none")),
        *(ar.tar_many(count, "gzip") for count in (max_files + 1, 2000)),
        *(ar.tar_special(adapter, kind, "gzip") for kind in ar.TAR_SPECIALS),
        *(ar.tar_truncated(adapter, keep) for keep in (10, 500, 990)),
        *(ar.zip_directory(entries, 2) for entries in (max_files + 1, 1000, under // 47)),
        ar.zip_directory(under // 1070, 2, name_bytes=1024),
        *(ar.zip_bomb(adapter, size) for size in (max_upload_bytes + 1, 4 * max_upload_bytes)),
        *(ar.zip_lying_size(adapter, short) for short in (1, 4096)),
        *(ar.zip_method(adapter, method) for method in (zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA, 99)),
        *(ar.zip_long_fields(name, extra) for name, extra in ((2000, 0), (60_000, 0), (10, 60_000))),
        *(ar.zip_special(adapter, kind) for kind in ar.ZIP_SPECIALS),
        *(ar.junk(name, 100_000, 7) for name in ("a.zip", "a.tar", "a.tar.gz", "a.tgz")),
        *(mp.many_parts(adapter, count, files) for count in (7, 1000) for files in (True, False)),
        *(mp.long_part_header(adapter, size) for size in (8193, under)),
        *(mp.many_part_headers(adapter, count) for count in (16, 10_000)),
        *(mp.filename(adapter, variant) for variant in mp.HOSTILE_FILENAMES),
        *(mp.truncated(adapter, keep) for keep in (100, 999)),
        *(mp.fields(adapter, variant) for variant in mp.FIELD_VARIANTS),
        *(mp.framing(adapter, variant) for variant in mp.FRAMINGS),
        *(doc.config_non_finite(adapter, field, number, nested) for field in ("lora_alpha", "lora_dropout")
          for number in doc.NON_FINITE for nested in (False, True)),
        *(doc.config_deep(adapter, depth, bracket) for depth in (1000, 200_000) for bracket in ("[", "{")),
        *(doc.config_big_int(adapter, field, 5000) for field in ("r", "lora_alpha", "lora_dropout")),
        *(doc.config_long_string(adapter, field, 900_000)
          for field in ("base_model_name_or_path", "target_modules", "peft_type")),
        *(doc.config_duplicate_key(adapter, key) for key in ("r", "peft_type", "target_modules")),
        *(doc.config_encoding(adapter, variant) for variant in doc.CONFIG_ENCODINGS),
        *(doc.config_regex(adapter, pattern) for pattern in doc.HOSTILE_REGEXES),
        *(doc.config_oversized(adapter, size) for size in (1000, 2 * MiB)),
        *(doc.header_length_lie(adapter, declared) for declared in (0, 1, 7, 4096, 2**40, 2**64 - 1)),
        *(doc.many_tensors(adapter, count) for count in (1, 90_000)),
        *(doc.tensor_field(adapter, field, value) for field, values in doc.TENSOR_FIELD_VALUES.items()
          for value in values),
        *(doc.header_shape(adapter, variant) for variant in doc.HEADER_SHAPES),
        *(doc.data_length(adapter, change) for change in (-1, -4096, 1, 4096)),
        *(doc.tiny_file(adapter, size) for size in (0, 1, 7, 8, 9)),
    ]
    names = [attack.name for attack in attacks]
    assert len(set(names)) == len(names), "every attack needs its own name"
    return attacks
