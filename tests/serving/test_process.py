"""A background loop of the agent or the router that fails on something unforeseen is logged and
started again, instead of dying silently while the process looks healthy; a burst of allocations
runs with the collector paused, and leaves it as it found it."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from serving.process import collector_paused, keep_running


def test_a_failing_loop_is_logged_and_started_again(caplog):
    runs = []

    async def flaky_loop() -> None:
        runs.append(len(runs))
        if len(runs) < 3:
            raise KeyError("node_id")  # say, a report the loop did not expect

    with caplog.at_level(logging.ERROR, logger="loraplane"):
        asyncio.run(asyncio.wait_for(keep_running("following the nodes", flaky_loop, backoff_max_s=0.1), 10))

    assert runs == [0, 1, 2]
    failures = [r for r in caplog.records if r.getMessage().startswith("following the nodes failed; starting it again in ")]
    assert len(failures) == 2 and all(r.exc_info[0] is KeyError for r in failures)


def test_cancelling_the_loop_stops_it_at_once():
    async def scenario() -> None:
        started = asyncio.Event()

        async def waiting_loop() -> None:
            started.set()
            await asyncio.Event().wait()

        task = asyncio.create_task(keep_running("waiting", waiting_loop))
        await started.wait()  # the loop runs: the cancellation reaches it, not the task's start
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled()

    asyncio.run(asyncio.wait_for(scenario(), 5))


def test_the_collector_is_paused_for_a_burst_and_left_as_it_was_after():
    assert gc.isenabled()
    with pytest.raises(KeyError), collector_paused():
        assert not gc.isenabled()
        raise KeyError("entries")  # a failing update still gives the collector back
    assert gc.isenabled()

    gc.disable()  # someone else paused it: not ours to switch on
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
