"""Waiting on a condition inside an event loop, for tests that run the router's or the agent's
parts in their own loop: the other tasks get to run until the condition holds."""

from __future__ import annotations

import asyncio
import time


async def until(condition, *, timeout_s: float = 5, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)  # a short poll: what is awaited is a few loop turns away
