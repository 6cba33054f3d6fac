"""Reconcile passes of the agent's own code against stand-ins, and the registry's judgement of
the report it produces."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from registry.nodes.schemas import NodeReport
from serving.agent.artifacts import AdapterCache
from serving.agent.proof import ProofCheck
from serving.agent.reconcile import Reconciler
from serving.agent.trust import TrustStore
from serving.agent.vllm_client import VllmClient
from serving.registry_client import ActiveSet
from tests.serving.agent.signing import REGISTRY_KEY, bundle
from tests.serving.agent.stand_ins import POOL, StandInVllm


class Node:
    """One node's agent state (its cache, its reconciler) across passes, as the agent keeps it,
    trusting `trusted` (a bundle of REGISTRY_KEY unless told) from an operator's file."""

    def __init__(self, cache_dir: Path, vllm: StandInVllm, *, pool: str = POOL,
                 trusted: dict[str, Any] | None = None) -> None:
        bundle_file = cache_dir.parent / "trust-bundle.json"
        bundle_file.parent.mkdir(parents=True, exist_ok=True)
        bundle_file.write_text(json.dumps(trusted or bundle(REGISTRY_KEY)))
        self.trust = TrustStore(pinned=cache_dir.parent / "pinned.json", operator_file=bundle_file,
                                fetch=_no_registry)
        self.trust.load()
        self.vllm = vllm
        self.cache = AdapterCache(cache_dir, 10**9, timeout_s=5)
        self.reconciler = Reconciler(None, self.cache, retry_failed_after_s=60,  # type: ignore[arg-type]
                                     proof=ProofCheck(self.trust, pool))

    def run_pass(self, entries: list, generation: int = 7) -> dict:
        async def one_pass() -> dict:
            # A client per event loop: each pass here runs in a loop of its own.
            self.reconciler.vllm = VllmClient(self.vllm.url, timeout_s=5)
            try:
                return await self.reconciler.run_pass(ActiveSet(generation, entries, f'"{generation}"'))
            finally:
                await self.reconciler.vllm.close()

        return asyncio.run(one_pass())


async def _no_registry() -> dict:
    raise AssertionError("a node with an operator's trust bundle never fetches the registry's")


def run_pass(cache_dir: Path, vllm: StandInVllm, entries: list) -> dict:
    return Node(cache_dir, vllm).run_pass(entries)


def accepted_by_the_registry(status: dict) -> NodeReport:
    """The registry's own schema for node reports: a report it would refuse is never seen."""
    limits = {"max_loras": 2, "max_cpu_loras": 8, "max_lora_rank": 16}
    return NodeReport.model_validate({**status, "limits": limits})
