"""What the agent and the router share as long-running processes: their log format, background
loops that outlive their own bugs, and running until SIGINT or SIGTERM asks them to stop."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable

from tenacity import AsyncRetrying, retry_if_exception_type, stop_never, wait_random_exponential

log = logging.getLogger("loraplane")


def configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request, and URLs that sign


async def until_signalled(work: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """Run `work(stop)`; SIGINT and SIGTERM set `stop`, and `work` winds down when it is set."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await work(stop)


async def keep_running(name: str, loop: Callable[[], Awaitable[None]], backoff_max_s: float = 30) -> None:
    """Run the endless `loop`. Should it fail on something unforeseen, log the failure and start
    it again after a pause: a bug in one pass must not silently stop a process's background work
    while the rest of the process looks healthy."""
    def failed(state) -> None:
        log.error("%s failed; starting it again", name, exc_info=state.outcome.exception())

    async for attempt in AsyncRetrying(wait=wait_random_exponential(multiplier=0.5, max=backoff_max_s),
                                       retry=retry_if_exception_type(Exception), stop=stop_never,
                                       before_sleep=failed):
        with attempt:
            await loop()
