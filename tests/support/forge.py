"""Write safetensors files byte by byte, so tests can craft exactly the damage they need."""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np

DTYPE_NAMES = {np.dtype("float32"): "F32", np.dtype("float16"): "F16", np.dtype("float64"): "F64",
               np.dtype("int8"): "I8", np.dtype("uint16"): "BF16"}  # uint16 carries raw bf16 bits


def encode(tensors: dict[str, np.ndarray], *, edit_header: Callable[[dict], None] | None = None,
           header_text: Callable[[str], str] | None = None) -> bytes:
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": DTYPE_NAMES[array.dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if edit_header is not None:
        edit_header(header)
    text = json.dumps(header)
    if header_text is not None:
        text = header_text(text)
    raw = text.encode()
    raw += b" " * (-len(raw) % 8)
    return len(raw).to_bytes(8, "little") + raw + b"".join(blobs)


def load(data: bytes) -> dict[str, np.ndarray]:
    from safetensors.numpy import load

    return dict(load(data))
