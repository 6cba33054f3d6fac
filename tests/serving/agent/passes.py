"""One reconcile pass of the agent's own code against stand-ins, and the registry's judgement
of the report it produces."""

from __future__ import annotations

import asyncio
from pathlib import Path

from registry.nodes.schemas import NodeReport
from serving.agent.artifacts import AdapterCache
from serving.agent.reconcile import Reconciler
from serving.agent.vllm_client import VllmClient
from serving.registry_client import ActiveSet
from tests.serving.agent.stand_ins import StandInVllm


def run_pass(cache_dir: Path, vllm: StandInVllm, entries: list) -> dict:
    async def one_pass() -> dict:
        client = VllmClient(vllm.url, timeout_s=5)
        try:
            reconciler = Reconciler(client, AdapterCache(cache_dir, 10**9, timeout_s=5),
                                    retry_failed_after_s=60)
            return await reconciler.run_pass(ActiveSet(7, entries, '"7"'))
        finally:
            await client.close()

    return asyncio.run(one_pass())


def accepted_by_the_registry(status: dict) -> NodeReport:
    """The registry's own schema for node reports: a report it would refuse is never seen."""
    limits = {"max_loras": 2, "max_cpu_loras": 8, "max_lora_rank": 16}
    return NodeReport.model_validate({**status, "vllm_url": "http://127.0.0.1:8000", "limits": limits})
