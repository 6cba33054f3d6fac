"""Fold peft's per-module scaling into the weights: an adapter any LoRA loader serves as peft does.

A `rank_pattern` / `alpha_pattern` adapter gives modules their own rank and alpha, so their own
scaling (module_scaling.py). An engine that applies one `lora_alpha / r` to every module serves
it wrongly. The fold writes, opt-in per upload, a plain adapter with the same output:

- every module is padded with zeros to the largest rank R (zero rows of lora_A and zero columns
  of lora_B add nothing);
- the config gets r = R and the lora_alpha that keeps the default modules' scaling s, with empty
  patterns;
- each other module's lora_B is multiplied by its own scaling over s, in float64, rounded once to
  the tensor's dtype. Modules at the default scaling keep their bytes.

The uploaded bytes stay stored beside it; the version records both digests (service.py).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from registry.adapters.lora_layout import LoraLayout, Pair
from registry.adapters.module_scaling import Scaling
from registry.adapters.peft_config import LoraSpec
from registry.adapters.safetensors_check import TensorInfo
from registry.errors import PayloadTooLarge, Unprocessable

TRANSFORM = "fold_scaling/1"  # bump when the derived bytes of an upload would change
BITS = {"F16": np.uint16, "BF16": np.uint16, "F32": np.uint32}
CHUNK_BYTES = 8 * 1024 * 1024  # read, scaled and written at a time


@dataclass(frozen=True)
class FoldedFiles:
    config: bytes
    weights: Path


def needed(spec: LoraSpec) -> bool:
    """Whether the config has anything to fold: a pattern key (even one matching nothing is
    dropped, so that the served config is plain)."""
    return bool(spec.raw.get("rank_pattern") or spec.raw.get("alpha_pattern"))


def fold(spec: LoraSpec, layout: LoraLayout, weights: Path, out_dir: Path, max_bytes: int) -> FoldedFiles:
    """The folded adapter, written in out_dir; refused before anything is written if its weights
    would be larger than max_bytes (padding an r=1 adapter to a pattern's 512 grows it 512 times)."""
    rank = max(pair.scaling.rank for pair in layout.pairs)
    default = Scaling(spec.r, spec.lora_alpha, spec.use_rslora).factor
    for pair in layout.pairs:
        if pair.form == "experts_3d" and pair.scaling.rank != rank:
            raise Unprocessable(
                f"cannot fold {pair.key!r}: its rank {pair.scaling.rank} differs from the largest, "
                f"{rank}, and the rank rows of 3-D expert LoRAs are not padded", code="fold_unsupported",
                hint="Upload it without fold_scaling (vLLM reads rank_pattern itself), or train the "
                     "experts at the adapter's largest rank.")
    by_tensor = {pair.a.name: (pair, "A") for pair in layout.pairs}
    by_tensor |= {pair.b.name: (pair, "B") for pair in layout.pairs}
    tensors = sorted(by_tensor, key=lambda name: _tensor(by_tensor[name]).start)
    header, position = {}, 0
    for name in tensors:
        pair, side = by_tensor[name]
        shape = _folded_shape(_tensor(by_tensor[name]), side, pair.scaling.rank, rank)
        size = math.prod(shape) * np.dtype(BITS[layout.dtype]).itemsize
        header[name] = {"dtype": layout.dtype, "shape": list(shape), "data_offsets": [position, position + size]}
        position += size
    header_bytes = _header_bytes({"__metadata__": {"format": "pt"}, **header})
    size = 8 + len(header_bytes) + position
    if size > max_bytes:
        raise PayloadTooLarge(
            f"folding the scaling pads every module to rank {rank}: the served weights would be "
            f"{size} bytes, more than the {max_bytes} an upload may be", code="fold_too_large",
            hint="Upload it without fold_scaling (vLLM reads rank_pattern itself), or train "
                 "with ranks closer to each other.")
    out = out_dir / "folded.safetensors"
    with weights.open("rb") as source, out.open("wb") as target:
        target.write(len(header_bytes).to_bytes(8, "little") + header_bytes)
        for name in tensors:
            pair, side = by_tensor[name]
            _write_folded(source, target, pair, side, rank, pair.scaling.factor / default)
    return FoldedFiles(config=_config(spec, rank), weights=out)


def _config(spec: LoraSpec, rank: int) -> bytes:
    """The plain config: the upload's, with r = rank, no patterns, and the default scaling."""
    config = dict(spec.raw, rank_pattern={}, alpha_pattern={}, r=rank)
    if rank != spec.r:
        grow = math.sqrt(rank / spec.r) if spec.use_rslora else rank / spec.r
        alpha = spec.lora_alpha * grow
        config["lora_alpha"] = int(alpha) if alpha.is_integer() else alpha
    return (json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def _tensor(found: tuple[Pair, str]) -> TensorInfo:
    pair, side = found
    return pair.a if side == "A" else pair.b


def _folded_shape(tensor: TensorInfo, side: str, rank: int, target: int) -> tuple[int, int]:
    rows, columns = tensor.shape
    return (rows * target // rank, columns) if side == "A" else (rows, columns * target // rank)


def _write_folded(source: BinaryIO, target: BinaryIO, pair: Pair, side: str, rank: int, ratio: float) -> None:
    """One tensor, a few MiB at a time: lora_A as it is, then zero rows up to `rank`; lora_B
    scaled by `ratio` and each row padded with zero columns."""
    tensor = _tensor((pair, side))
    bits_type = BITS[tensor.dtype]
    rows, columns = tensor.shape
    row_bytes = columns * np.dtype(bits_type).itemsize
    padding = rank - pair.scaling.rank
    if side == "A":
        _copy(source, target, tensor.start, tensor.end)
        _write_zeros(target, padding * row_bytes)
        return
    step = max(1, CHUNK_BYTES // row_bytes)
    for first in range(0, rows, step):
        count = min(step, rows - first)
        source.seek(tensor.start + first * row_bytes)
        bits = np.frombuffer(source.read(count * row_bytes), dtype=bits_type).reshape(count, columns)
        if ratio != 1.0:
            bits = _scaled(bits, tensor.dtype, ratio, pair.key)
        if padding:
            bits = np.concatenate([bits, np.zeros((count, padding), bits_type)], axis=1)
        target.write(bits.tobytes())


def _copy(source: BinaryIO, target: BinaryIO, start: int, end: int) -> None:
    source.seek(start)
    while start < end:
        chunk = source.read(min(CHUNK_BYTES, end - start))
        target.write(chunk)
        start += len(chunk)


def _write_zeros(target: BinaryIO, count: int) -> None:
    zeros = bytes(min(count, CHUNK_BYTES))
    while count > 0:
        target.write(zeros[:count])
        count -= len(zeros)


def _scaled(bits: np.ndarray, dtype: str, ratio: float, key: str) -> np.ndarray:
    """bits * ratio, computed in float64 and rounded once to the dtype. For bf16 the float32
    step rounds to odd (truncate, then set the last bit if anything was cut), so that rounding
    it on to the nearest even bf16 equals one rounding of the float64 value."""
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is refused below
        if dtype == "BF16":
            values = (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64) * ratio
            wide = values.astype(np.float32).view(np.uint32)
            wide = wide - (np.abs(wide.view(np.float32).astype(np.float64)) > np.abs(values)).astype(np.uint32)
            wide = wide | (wide.view(np.float32).astype(np.float64) != values).astype(np.uint32)
            rounded = ((wide + 0x7FFF + ((wide >> 16) & 1)) >> 16).astype(np.uint16)
            finite = np.isfinite((rounded.astype(np.uint32) << 16).view(np.float32))
        else:
            floats = np.float16 if dtype == "F16" else np.float32
            result = (bits.view(floats).astype(np.float64) * ratio).astype(floats)
            rounded, finite = result.view(bits.dtype), np.isfinite(result)
    if not finite.all():
        raise Unprocessable(f"cannot fold {key!r}: its scaling ({ratio:g} times the default) takes "
                            f"lora_B beyond the range of {dtype}", code="fold_overflow",
                            hint="Save the adapter in float32, or upload it without fold_scaling.")
    return rounded


def _header_bytes(header: dict) -> bytes:
    raw = json.dumps(header, separators=(",", ":")).encode()
    return raw + b" " * (-len(raw) % 8)  # safetensors aligns the data to 8 bytes

