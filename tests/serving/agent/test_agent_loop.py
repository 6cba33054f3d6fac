"""The whole agent, in this process, against a stand-in registry and vLLM: whatever one version
or the node's disk does, the agent goes on following the registry and reports what it holds."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path

from registry.nodes.schemas import NodeReport
from serving.agent.main import Agent
from serving.agent.settings import AgentSettings
from tests.serving.agent.node_disk import LARGE, SMALL, largest_file
from tests.serving.agent.stand_ins import StandInRegistry, StandInVllm, entry

POOL = "chat"


def run_agent(registry: StandInRegistry, vllm: StandInVllm, state_dir: Path,
              until: Callable[[], object], timeout_s: float = 15) -> None:
    settings = AgentSettings(pool=POOL, registry_url=registry.url, vllm_url=vllm.url,
                             node_token="node-token", node_id="node-1", state_dir=state_dir,
                             metrics_port=0, resync_s=0.2, heartbeat_s=1, poll_wait_s=1,
                             request_timeout_s=5, backoff_max_s=1)

    async def run() -> None:
        stop = asyncio.Event()
        running = asyncio.create_task(Agent(settings).run(stop))
        deadline = time.monotonic() + timeout_s
        while not until() and time.monotonic() < deadline and not running.done():
            await asyncio.sleep(0.05)
        stop.set()
        await running

    asyncio.run(run())


def last_report(registry: StandInRegistry) -> dict | None:
    return registry.reports[-1] if registry.reports else None


def test_a_version_the_disk_cannot_take_is_reported_and_the_rest_is_served(store, vllm, tmp_path):
    large, small = entry(store, "large", LARGE), entry(store, "small", SMALL)
    registry = StandInRegistry(POOL, [large, small])
    try:
        with largest_file():
            run_agent(registry, vllm, tmp_path / "state", until=lambda: registry.reports)
    finally:
        registry.close()

    report = NodeReport.model_validate(last_report(registry))  # as the registry reads it
    assert report.generation == 1
    assert [(a.served_name, a.digest) for a in report.loaded] == [("acme/small@1", small["digest"])]
    assert [(f.served_name, f.reason) for f in report.failures] == [
        ("acme/large@1", "the node's cache could not store acme/large@1: File too large")]
    assert list(vllm.adapters) == ["acme/small@1"]


def test_a_last_known_good_copy_the_disk_cannot_take_does_not_stop_the_node(store, vllm, tmp_path):
    small = entry(store, "small", SMALL)
    registry = StandInRegistry(POOL, [small])
    # A folder where the agent writes its copy before renaming it into place.
    (tmp_path / "state" / f"active-set.{os.getpid()}.tmp").mkdir(parents=True)
    try:
        run_agent(registry, vllm, tmp_path / "state", until=lambda: registry.reports)
    finally:
        registry.close()

    report = NodeReport.model_validate(last_report(registry))
    assert [a.served_name for a in report.loaded] == ["acme/small@1"] and report.failures == []
    assert not (tmp_path / "state" / "active-set.json").exists()
