"""Parked long-polls end when the process is asked to stop.

On SIGTERM or SIGINT uvicorn stops accepting connections, then waits for every running request
before the application's own shutdown, and a long-poll runs for up to its `?wait=` (300 s), a
stopped or killed node's included. So the signal first answers the parked long-polls
(GenerationWatch.end_waits), then goes on to uvicorn's handler. This is chained at start-up,
when uvicorn's handler is in place (it installs it around serving, in each worker process)."""

from __future__ import annotations

import asyncio
import signal
import threading
from types import FrameType

from registry.active_set.long_poll.watch import GenerationWatch

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def end_waits_on_stop(watch: GenerationWatch) -> None:
    if threading.current_thread() is not threading.main_thread():
        return  # an app served from another thread (a test client): no signals reach it
    loop = asyncio.get_running_loop()
    for stop in STOP_SIGNALS:
        server_handler = signal.getsignal(stop)
        if not callable(server_handler):
            continue  # ignored, or the default: nothing serves on to wait for

        def handler(signum: int, frame: FrameType | None, server_handler=server_handler) -> None:
            loop.call_soon_threadsafe(watch.end_waits)
            server_handler(signum, frame)

        signal.signal(stop, handler)
