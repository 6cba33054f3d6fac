"""Hostile JSON in adapter_config.json, and hostile safetensors headers, beside valid other parts."""

from __future__ import annotations

import json

from bench.hostile_corpus import Attack, as_attack
from bench.hostile_corpus.adapter import Adapter, encode_header, read_header

# --- adapter_config.json ----------------------------------------------------------------------

NON_FINITE = ("1e999", "-1e999", "1E+400", "NaN", "Infinity", "-Infinity", "123456789e123456789")
CONFIG_FIELDS = ("lora_alpha", "lora_dropout", "r", "rank_pattern", "loftq_config", "target_modules")
# Each can match no module path (they all end in "#"), so none can make an upload valid.
HOSTILE_REGEXES = (
    "((a{1000}){1000}){1000}#", "(((((((((((((((((((((a)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+#",
    "(?:(?:(?:(?:(?:(?:(?:(?:(?:(?:(?:(?:a{2}){2}){2}){2}){2}){2}){2}){2}){2}){2}){2}){2}#",
    "((((((((((((a{2,}){2,}){2,}){2,}){2,}){2,}){2,}){2,}){2,}){2,}){2,}){2,})#", "a{65535}#",
    "(.|.)*[A-Z]#", "(a*)*(b*)*(.*)*#", "(.*a){20}#", r".*\.(q_proj|v_proj){e<=1}#", "[[:alpha:]]+#",
    r"\p{L}+#", "(?R)#", "(?V1).*#", "a" * 300 + "#", "(" * 200 + ")" * 200 + "#",
)


def _config_attack(adapter: Adapter, name: str, config: bytes) -> Attack:
    return as_attack(f"config/{name}", adapter.files(config=config))


def _with_raw(adapter: Adapter, field: str, raw_value: str) -> bytes:
    """The valid config with one field's value written as raw JSON text."""
    placeholder = "\u0000placeholder\u0000"
    text = json.dumps({**adapter.config, field: placeholder})
    return text.replace(json.dumps(placeholder), raw_value).encode("utf-8", "surrogatepass")


def config_non_finite(adapter: Adapter, field: str, number: str, nested: bool) -> Attack:
    raw = f'{{"q_proj": [{number}]}}' if nested else number
    return _config_attack(adapter, f"non_finite/{field}/{number}/{nested}", _with_raw(adapter, field, raw))


def config_deep(adapter: Adapter, depth: int, bracket: str) -> Attack:
    opening, closing = ("[", "]") if bracket == "[" else ('{"a":', "}")
    raw = opening * depth + "1" + closing * depth
    return _config_attack(adapter, f"deep/{bracket}/{depth}", _with_raw(adapter, "peft_type", raw))


def config_big_int(adapter: Adapter, field: str, digits: int) -> Attack:
    return _config_attack(adapter, f"big_int/{field}/{digits}", _with_raw(adapter, field, "9" * digits))


def config_long_string(adapter: Adapter, field: str, size: int) -> Attack:
    value = json.dumps(["q_proj" * (size // 6 + 1)] if field == "target_modules" else "m" * size)
    return _config_attack(adapter, f"long_string/{field}/{size}", _with_raw(adapter, field, value))


def config_duplicate_key(adapter: Adapter, key: str) -> Attack:
    text = json.dumps(adapter.config)
    value = json.dumps(adapter.config.get(key, "LORA"))
    return _config_attack(adapter, f"duplicate_key/{key}",
                          text[:-1].encode() + f', "{key}": {value}}}'.encode())


def config_encoding(adapter: Adapter, variant: str) -> Attack:
    text = json.dumps(adapter.config)
    data = {
        "utf16": text.encode("utf-16"),
        "bom": b"\xef\xbb\xbf" + text.encode(),
        "invalid_utf8": text.encode().replace(b'"LORA"', b'"LO\xffRA"'),
        "lone_surrogate": _with_raw(adapter, "base_model_name_or_path", '"\\ud800"'),
        "nul_in_base": _with_raw(adapter, "base_model_name_or_path", '"tiny\\u0000llama"'),
        "not_an_object": b"[" + text.encode() + b"]",
        "empty": b"",
        "whitespace": b" \n\t " * 1000,
    }[variant]
    return _config_attack(adapter, f"encoding/{variant}", data)


CONFIG_ENCODINGS = ("utf16", "bom", "invalid_utf8", "lone_surrogate", "nul_in_base", "not_an_object",
                    "empty", "whitespace")


def config_regex(adapter: Adapter, pattern: str) -> Attack:
    return _config_attack(adapter, f"regex/{pattern[:40]}",
                          json.dumps({**adapter.config, "target_modules": pattern}).encode())


def config_oversized(adapter: Adapter, size: int) -> Attack:
    text = json.dumps({**adapter.config, "padding": "p" * size, "r": -1})
    return _config_attack(adapter, f"oversized/{size}", text.encode())


# --- safetensors ------------------------------------------------------------------------------


def _weights_attack(adapter: Adapter, name: str, weights: bytes) -> Attack:
    return as_attack(f"safetensors/{name}", adapter.files(weights=weights))


def header_length_lie(adapter: Adapter, declared: int) -> Attack:
    """The first 8 bytes claim `declared` bytes of header; the rest of the file is unchanged."""
    header, data = read_header(adapter.weights)
    if declared == len(json.dumps(header)) + (-len(json.dumps(header)) % 8):
        declared += 1  # the true length would make the file valid
    return _weights_attack(adapter, f"length_lie/{declared}", encode_header(header, data, declared=declared))


def many_tensors(adapter: Adapter, count: int) -> Attack:
    """`count` empty tensors with names no base has, beside the real ones: a large header."""
    header, data = read_header(adapter.weights)
    end = len(data)
    for index in range(count):
        header[f"junk.{index}"] = {"dtype": "F32", "shape": [0], "data_offsets": [end, end]}
    return _weights_attack(adapter, f"many_tensors/{count}", encode_header(header, data))


def _first_tensor(header: dict) -> str:
    return next(name for name in header if name != "__metadata__")


def tensor_field(adapter: Adapter, field: str, raw_value: str) -> Attack:
    """One tensor's dtype, shape or data_offsets replaced by raw JSON text."""
    header, data = read_header(adapter.weights)
    name = _first_tensor(header)
    placeholder = "\u0000placeholder\u0000"
    header[name][field] = placeholder
    text = json.dumps(header).replace(json.dumps(placeholder), raw_value)
    return _weights_attack(adapter, f"field/{field}/{raw_value[:40]}", encode_header(text, data))


TENSOR_FIELD_VALUES = {
    "dtype": ('"F128"', '""', "5", "null", '["F32"]', json.dumps("F" * 10000), '"I64"', '"BOOL"'),
    "shape": ("[1099511627776, 1099511627776]", "[-1, 8]", "[1,1,1,1,1,1,1,1,1]", "[1e999]", "[8.0, 128]",
              "[[8], 128]", "[18446744073709551616]", "{}", "[" * 5000 + "]" * 5000),
    "data_offsets": ("[0]", "[-8, 0]", "[0.0, 4096]", "[18446744073709551616, 18446744073709551617]",
                     "[4096, 0]", '["0", "4096"]', "[0, 1e999]", "[0, NaN]", "null"),
}


def header_shape(adapter: Adapter, variant: str) -> Attack:
    header, data = read_header(adapter.weights)
    name = _first_tensor(header)
    text = {
        "array": json.dumps(list(header.values())),
        "string": json.dumps("header"),
        "number": "8",
        "deep": "[" * 100_000 + "]" * 100_000,
        "duplicate": json.dumps(header)[:-1] + f", {json.dumps(name)}: {json.dumps(header[name])}}}",
        "bad_metadata": json.dumps({**header, "__metadata__": {"format": {"nested": 1}}}),
        "not_utf8": json.dumps(header).replace(name, name + "\udcff"),
        "surrogate_escape": json.dumps(header).replace(json.dumps(name), json.dumps(name)[:-1] + '\\ud800"'),
        "empty_object": "{}",
        "trailing_text": json.dumps(header) + " junk",
    }[variant]
    return _weights_attack(adapter, f"header/{variant}", encode_header(text.encode("utf-8", "surrogateescape"), data))


HEADER_SHAPES = ("array", "string", "number", "deep", "duplicate", "bad_metadata", "not_utf8",
                 "surrogate_escape", "empty_object", "trailing_text")


def data_length(adapter: Adapter, change: int) -> Attack:
    """The data section cut short or grown by `change` bytes (never zero)."""
    change = change or 1
    weights = adapter.weights[:change] if change < 0 else adapter.weights + b"\0" * change
    return _weights_attack(adapter, f"data_length/{change}", weights)


def tiny_file(adapter: Adapter, size: int) -> Attack:
    return _weights_attack(adapter, f"tiny/{size}", adapter.weights[:size])
