"""Malformed or oversized multipart/form-data bodies around a valid adapter."""

from __future__ import annotations

from bench.hostile_corpus import Attack
from bench.hostile_corpus.adapter import CONFIG, WEIGHTS, Adapter
from bench.hostile_corpus.multipart import BOUNDARY, close, content_type, part


def _files(adapter: Adapter) -> list[bytes]:
    return [part("file", data, filename=name) for name, data in adapter.files()]


def many_parts(adapter: Adapter, count: int, as_files: bool) -> Attack:
    """The adapter, then `count` more small parts."""
    extra = [part("file" if as_files else "base_model", b"x", filename=f"f{index}.txt" if as_files else None)
             for index in range(count)]
    return Attack(f"multipart/many_parts/{count}/{as_files}",
                  b"".join(_files(adapter) + extra) + close(), content_type())


def long_part_header(adapter: Adapter, size: int) -> Attack:
    """A part header of `size` bytes: one header value, and no end of line for a long time."""
    bloated = part("file", adapter.files()[0][1], filename=CONFIG, headers=[b"X-Pad: " + b"p" * size])
    return Attack(f"multipart/long_part_header/{size}", bloated + _files(adapter)[1] + close(), content_type())


def many_part_headers(adapter: Adapter, count: int) -> Attack:
    headers = [f"X-H{index}: v".encode() for index in range(count)]
    bloated = part("file", adapter.files()[0][1], filename=CONFIG, headers=headers)
    return Attack(f"multipart/many_part_headers/{count}", bloated + _files(adapter)[1] + close(),
                  content_type())


HOSTILE_FILENAMES = {
    "empty": b"", "dot": b".", "dotdot": b"..", "slash": b"../" + CONFIG.encode(),
    "backslash": b"..\\" + CONFIG.encode(), "nul": CONFIG.encode() + b"\0.txt",
    "not_utf8": b"adapter_config\xff.json", "long": b"a" * 7000 + b".json",
    "newline": b"adapter\r\nX-Injected: 1", "pickle": b"adapter_model.bin", "archive_dup": b"a.tar.gz",
}


def filename(adapter: Adapter, variant: str) -> Attack:
    """The config sent under a hostile file name (and the weights beside it)."""
    first = part("file", adapter.files()[0][1], filename=HOSTILE_FILENAMES[variant])
    second = _files(adapter)[1] if variant != "archive_dup" else part("file", b"x", filename="b.zip")
    return Attack(f"multipart/filename/{variant}", first + second + close(), content_type())


def truncated(adapter: Adapter, keep_permille: int) -> Attack:
    """A well-formed body cut before its closing boundary."""
    body = b"".join(_files(adapter)) + close()
    keep = min(len(body) * keep_permille // 1000, len(body) - len(close()))
    return Attack(f"multipart/truncated/{keep_permille}", body[:keep], content_type())


def fields(adapter: Adapter, variant: str) -> Attack:
    extra = {
        "long_text": [part("base_model", b"b" * 100_000)],
        "repeated_text": [part("base_model", b"tiny-llama"), part("base_model", b"tiny-llama")],
        "unknown_text": [part("tenant", b"globex")],
        "file_under_other_name": [part("weights", b"x", filename="x.safetensors")],
        "bad_sha": [part("weights_sha256", b"z" * 64)],
        "control_character_base": [part("base_model", b"tiny\x00llama")],
    }[variant]
    return Attack(f"multipart/fields/{variant}", b"".join(extra + _files(adapter)) + close(), content_type())


FIELD_VARIANTS = ("long_text", "repeated_text", "unknown_text", "file_under_other_name", "bad_sha",
                  "control_character_base")


def framing(adapter: Adapter, variant: str) -> Attack:
    body = b"".join(_files(adapter)) + close()
    attacks = {
        "no_boundary": (body, "multipart/form-data"),
        "wrong_boundary": (body, content_type("other-boundary")),
        "long_boundary": (body, content_type("b" * 5000)),
        "not_multipart": (body, "application/octet-stream"),
        "preamble": (b"p" * 1_000_000 + b"\r\n" + body, content_type()),
        "no_parts": (close(), content_type()),
        "garbage": (b"\x00\xff" * 50_000, content_type()),
        "header_without_colon": (b"--" + BOUNDARY.encode() + b"\r\nno colon here\r\n\r\nx\r\n" + close(),
                                 content_type()),
        "boundary_inside_data": (part("file", b"--" + BOUNDARY.encode() + b"\r\n", filename=WEIGHTS)
                                 + close(), content_type()),
        "lf_only": (body.replace(b"\r\n", b"\n"), content_type()),
    }
    data, kind = attacks[variant]
    return Attack(f"multipart/framing/{variant}", data, kind)


FRAMINGS = ("no_boundary", "wrong_boundary", "long_boundary", "not_multipart", "preamble", "no_parts",
            "garbage", "header_without_colon", "boundary_inside_data", "lf_only")
