"""What the agent and the router share as long-running processes: their log format, and running
until SIGINT or SIGTERM asks them to stop cleanly."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable


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
