"""Read and check a safetensors file the way the `safetensors` library will, without torch.

vLLM loads adapters through that library, so a file it would refuse (or, worse, accept with
silent damage such as NaN weights) is refused here, before anything is stored.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from registry.errors import Unprocessable

FILE = "adapter_model.safetensors"
DTYPE_SIZES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2,
    "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
}
# For each accepted dtype: the unsigned view and the exponent mask. All exponent bits set
# means Inf or NaN, which a bit test finds without converting bf16.
FLOAT_EXPONENT_MASKS = {
    "F16": (np.uint16, 0x7C00),
    "BF16": (np.uint16, 0x7F80),
    "F32": (np.uint32, 0x7F800000),
}
CHUNK_BYTES = 8 * 1024 * 1024
MAX_NAME_CHARS = 300


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int  # absolute offset in the file
    end: int


def refuse(message: str, *, code: str = "invalid_safetensors", hint: str = "") -> Unprocessable:
    return Unprocessable(
        f"{FILE}: {message}",
        code=code,
        hint=hint or "Save the adapter again with peft's save_pretrained(safe_serialization=True).",
    )


@dataclass(frozen=True)
class HeaderLimit:
    size: int
    reason: str  # where the limit comes from, for the hint


def read_tensors(f: BinaryIO, file_size: int, limit: HeaderLimit) -> list[TensorInfo]:
    """Parse the header and check that the tensors tile the data section exactly."""
    if file_size == 0:
        raise refuse("the file is empty", code="empty_file")
    if file_size < 8:
        raise refuse(f"the file is truncated: {file_size} bytes, shorter than the 8-byte header length")
    f.seek(0)
    header_len = int.from_bytes(f.read(8), "little")
    if header_len > limit.size:  # before anything is read or parsed
        raise refuse(
            f"header length {header_len} exceeds the limit of {limit.size} bytes",
            code="header_too_large",
            hint=f"The limit: {limit.reason}. Save the adapter again with peft's "
                 "save_pretrained(safe_serialization=True).",
        )
    if 8 + header_len > file_size:
        raise refuse(
            f"the file is truncated: the header claims {header_len} bytes "
            f"but only {file_size - 8} follow"
        )
    header = _parse_header(f.read(header_len))
    data_start, data_len = 8 + header_len, file_size - 8 - header_len
    tensors = [_tensor_info(name, entry, data_start, data_len) for name, entry in header.items()]
    _check_tiling(tensors, data_start, data_len)
    return tensors


def check_finite(f: BinaryIO, tensor: TensorInfo) -> None:
    view, mask = FLOAT_EXPONENT_MASKS[tensor.dtype]
    item = np.dtype(view).itemsize
    f.seek(tensor.start)
    remaining = tensor.end - tensor.start
    step = CHUNK_BYTES - CHUNK_BYTES % item
    while remaining:
        chunk = f.read(min(step, remaining))
        if not chunk:
            raise refuse(f"the file ends inside tensor {tensor.name!r}")
        remaining -= len(chunk)
        bits = np.frombuffer(chunk, dtype=view)
        if np.any((bits & view(mask)) == mask):
            raise refuse(
                f"tensor {tensor.name!r} contains NaN or Inf values",
                code="non_finite_weights",
                hint="Check the training run for divergence; vLLM would serve these weights silently.",
            )


def _parse_header(raw: bytes) -> dict:
    def no_duplicates(pairs: list[tuple[str, object]]) -> dict:
        unique = dict(pairs)
        if len(unique) != len(pairs):
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    raise refuse(f"header names tensor {key[:200]!r} more than once")
                seen.add(key)
        return unique

    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=no_duplicates)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        # ValueError covers JSONDecodeError and integers too long to convert.
        raise refuse(f"the header is not valid JSON ({str(error)[:200]})") from None
    if not isinstance(header, dict):
        raise refuse("the header is not a JSON object")
    metadata = header.pop("__metadata__", None)
    if metadata is not None and not (
        isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())
    ):
        raise refuse("__metadata__ must map strings to strings")
    if not header:
        raise refuse("the file holds no tensors", code="no_tensors")
    return header


def _tensor_info(name: str, entry: object, data_start: int, data_len: int) -> TensorInfo:
    if len(name) > MAX_NAME_CHARS:
        raise refuse(f"a tensor name is longer than {MAX_NAME_CHARS} characters: {_short(name)}")
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
        raise refuse(f"tensor {name!r} must have exactly dtype, shape and data_offsets")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_SIZES:
        raise refuse(f"tensor {name!r} has unknown dtype {_short(dtype)}")
    if not (isinstance(shape, list) and len(shape) <= 8 and all(_is_count(d) for d in shape)):
        raise refuse(f"tensor {name!r} has an invalid shape {_short(shape)}")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_count(o) for o in offsets)):
        raise refuse(f"tensor {name!r} has invalid data_offsets {_short(offsets)}")
    begin, end = offsets
    if begin > end or end > data_len:
        raise refuse(
            f"tensor {name!r} has data_offsets [{begin}, {end}] beyond the end of the data "
            f"({data_len} bytes): the file is truncated or corrupt"
        )
    expected = math.prod(shape) * DTYPE_SIZES[dtype]
    if end - begin != expected:
        raise refuse(
            f"tensor {name!r} spans {end - begin} bytes but {dtype} {shape} needs {expected}"
        )
    if dtype not in FLOAT_EXPONENT_MASKS:
        raise refuse(
            f"tensor {name!r} has dtype {dtype}; LoRA weights must be F16, BF16 or F32",
            code="unsupported_dtype",
            hint="Cast the adapter to float16, bfloat16 or float32 before saving.",
        )
    return TensorInfo(name, dtype, tuple(shape), data_start + begin, data_start + end)


def _check_tiling(tensors: list[TensorInfo], data_start: int, data_len: int) -> None:
    position = data_start
    for tensor in sorted(tensors, key=lambda t: (t.start, t.end)):
        if tensor.start < position:
            raise refuse(f"tensor {tensor.name!r} overlaps the tensor before it")
        if tensor.start > position:
            raise refuse(f"there is a gap of {tensor.start - position} bytes before {tensor.name!r}")
        position = tensor.end
    if position != data_start + data_len:
        raise refuse(
            f"{data_start + data_len - position} bytes after the last tensor are not covered "
            "by the header"
        )


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53
