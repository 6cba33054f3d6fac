"""The stored artifact: a deterministic tar of the two PEFT files, named by its sha256.

The same config and weights always give the same bytes, whether they arrived as two files, a
.tar.gz or a .zip, so identical adapters share one digest and one stored object.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from registry.adapters.peft_config import FILE as CONFIG_FILE
from registry.adapters.safetensors_check import FILE as WEIGHTS_FILE


@dataclass(frozen=True)
class Artifact:
    path: Path
    digest: str
    size: int

    @property
    def storage_key(self) -> str:
        return storage_key(self.digest)


def storage_key(digest: str) -> str:
    return f"artifacts/sha256/{digest[:2]}/{digest}.tar"


def build(config: bytes, weights: BinaryIO, weights_size: int, path: Path) -> Artifact:
    with open(path, "wb") as raw:
        sink = _HashingWriter(raw)
        with tarfile.open(fileobj=sink, mode="w|", format=tarfile.USTAR_FORMAT) as tar:
            tar.addfile(_member(CONFIG_FILE, len(config)), io.BytesIO(config))
            weights.seek(0)
            tar.addfile(_member(WEIGHTS_FILE, weights_size), weights)
    return Artifact(path=path, digest=sink.sha256.hexdigest(), size=sink.size)


def _member(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o644, 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


class _HashingWriter:
    def __init__(self, raw: BinaryIO) -> None:
        self.raw, self.sha256, self.size = raw, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        self.size += len(data)
        return self.raw.write(data)
