"""Count adapter loads by vLLM: each load opens the version's `adapter_model.safetensors` in the
agent's cache (`<cache>/<digest>/`), so inotify's IN_OPEN events on those folders count loads,
on every node, with no change to vLLM. Linux only."""

from __future__ import annotations

import ctypes
import os
import struct
from pathlib import Path

IN_OPEN = 0x20
IN_NONBLOCK = 0o4000
WEIGHTS = b"adapter_model.safetensors"
EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name


class LoadCounter:
    def __init__(self, caches: list[Path]) -> None:
        self._libc = ctypes.CDLL("libc.so.6", use_errno=True)
        self._fd = self._libc.inotify_init1(IN_NONBLOCK)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self.folders = [d for cache in caches for d in cache.iterdir() if d.is_dir()]
        for folder in self.folders:
            if self._libc.inotify_add_watch(self._fd, str(folder).encode(), IN_OPEN) < 0:
                raise OSError(ctypes.get_errno(), f"cannot watch {folder}")

    def take(self) -> int:
        """Loads since the last call."""
        loads = 0
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                return loads
            offset = 0
            while offset < len(data):
                _, _, _, length = EVENT.unpack_from(data, offset)
                name = data[offset + EVENT.size: offset + EVENT.size + length].rstrip(b"\0")
                loads += name == WEIGHTS
                offset += EVENT.size + length

    def close(self) -> None:
        os.close(self._fd)
