"""What the agent and the router share as long-running processes: their log format, background
loops that outlive their own bugs, running until SIGINT or SIGTERM asks them to stop, and an HTTP
server that leaves those signals to them."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import random
import signal
import time
from collections.abc import Awaitable, Callable, Iterator

import uvicorn

log = logging.getLogger("loraplane")


def configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request, and URLs that sign
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # the same, for lightkube's requests


async def until_signalled(work: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """Run `work(stop)`; SIGINT and SIGTERM set `stop`, and `work` winds down when it is set."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await work(stop)


class ServerWithoutSignals(uvicorn.Server):
    """A uvicorn server that leaves SIGINT and SIGTERM to the process (until_signalled), which
    stops it, by setting `should_exit`, when its own shutdown reaches it. uvicorn's `serve` takes
    both signals for itself while it runs (and raises them again once it stops): the server would
    begin closing at the signal, ahead of the process's own order."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def keep_running(name: str, loop: Callable[[], Awaitable[None]], backoff_max_s: float = 30,
                       healthy_after_s: float = 60) -> None:
    """Run the endless `loop`. Should it fail on something unforeseen, log the failure and start
    it again after a pause: a bug in one pass must not silently stop a process's background work
    while the rest of the process looks healthy. Pauses grow while failures come quickly, and
    start small again after a run that lasted `healthy_after_s`."""
    failures = 0
    while True:
        started = time.monotonic()
        try:
            await loop()
            return
        except Exception:
            failures = 1 if time.monotonic() - started >= healthy_after_s else failures + 1
            pause = random.uniform(0, min(backoff_max_s, 0.5 * 2**failures))
            log.exception("%s failed; starting it again in %.1f s", name, pause)
            await asyncio.sleep(pause)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Keep CPython's cyclic collector from running during a burst of small allocations that
    makes no reference cycles (what the burst frees, reference counting frees). Otherwise each
    collection the burst sets off walks the whole heap, and the burst's cost grows faster than
    its size."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
