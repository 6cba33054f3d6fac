"""A pause of CPython's cyclic collector around a burst of small allocations that makes no
reference cycles, such as reading and rendering a large pool's active set (thousands of rows,
presigned URLs and models at once): each collection the burst set off would walk the whole heap,
and the burst's cost would grow faster than its size. What the burst frees, reference counting
frees; the collector runs again after it.

The collector is the process's, not the thread's: a burst in one thread pauses it for all. A burst
that found it running starts it again as it ends, even while another thread's burst goes on; one
that found it paused leaves it paused."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
