"""Adapter files for the agent's fast tests, and a real write error on the node's disk."""

from __future__ import annotations

import contextlib
import resource
from collections.abc import Iterator

SMALL = {"adapter_config.json": b'{"r": 8}', "adapter_model.safetensors": b"s" * 4096}
LARGE = {"adapter_config.json": b'{"r": 8}', "adapter_model.safetensors": b"L" * (1024 * 1024)}
FILE_SIZE_LIMIT = 256 * 1024  # SMALL fits, LARGE does not


@contextlib.contextmanager
def largest_file(limit: int = FILE_SIZE_LIMIT) -> Iterator[None]:
    """A real write error (EFBIG, "File too large") for any file past `limit` bytes, as a full
    disk gives ENOSPC: `ulimit -f` for this process. Python ignores SIGXFSZ, so the write fails
    with OSError instead of killing the process. Mounting a small full filesystem needs
    privileges the tests do not have."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
