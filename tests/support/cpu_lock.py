"""One lock across the suite's lanes, for the CPU: a test that measures speed holds it alone, and
each vLLM engine started outside the kit's lane holds it shared while it lives. So a measurement
never shares the two cores with a second engine: with one running, the serving-cost test read an
adapter at 0.24 of the base in all three rounds, since oversubscribed cores slow the LoRA path
most. Without workers there is one lane, and the lock is always free."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from devkit.services import wait_for


def _path(tmp_path_factory) -> Path:
    """In the folder above the workers' own temporary folders: one per run, and pytest prunes it."""
    return tmp_path_factory.getbasetemp().parent / "loraplane-cpu.lock"


@contextmanager
def _held(tmp_path_factory, mode: int, timeout_s: float = 600) -> Iterator[None]:
    with open(_path(tmp_path_factory), "a") as handle:
        wait_for(lambda: _try(handle, mode), timeout_s=timeout_s, what="the suite's CPU lock")
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _try(handle, mode: int) -> bool:
    try:
        fcntl.flock(handle, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def measuring_alone(tmp_path_factory):
    """Wait until no other engine runs, and keep new ones from starting meanwhile."""
    return _held(tmp_path_factory, fcntl.LOCK_EX)


def engine_running(tmp_path_factory):
    """Held while an engine outside the kit's lane lives."""
    return _held(tmp_path_factory, fcntl.LOCK_SH)
