"""One reconcile pass: compare the desired set with what vLLM really holds, load what is missing
(downloaded and verified first), unload what this agent loaded and is no longer wanted, and
return the status to report. Adapters loaded at vLLM's start are never touched: the agent manages
only adapters whose files live in its own cache, which is also how it adopts, after a restart,
what it had loaded before."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from serving.agent import metrics
from serving.agent.artifacts import AdapterCache, DigestMismatch, DownloadFailed
from serving.registry_client import ActiveSet
from serving.agent.vllm_client import LoadRefused, VllmClient

log = logging.getLogger(__name__)


@dataclass
class Failure:
    reason: str
    kind: str  # digest | download | vllm
    at: float


class Reconciler:
    def __init__(self, vllm: VllmClient, cache: AdapterCache, *, retry_failed_after_s: float) -> None:
        self.vllm, self.cache, self.retry_after_s = vllm, cache, retry_failed_after_s
        self.failures: dict[str, Failure] = {}

    async def run_pass(self, desired: ActiveSet) -> dict[str, Any]:
        """Raises VllmUnavailable when vLLM cannot be asked (it is down or restarting)."""
        metrics.PASSES.inc()
        wanted = {entry["served_name"]: entry for entry in desired.entries}
        actual = await self.vllm.adapters()
        for name, path in list(actual.items()):
            if self.cache.owns(path) and (name not in wanted or not self.cache.digest_at(path)):
                # Not wanted any more, or its files are gone from the cache (vLLM would fail to
                # reload it after evicting it): unload, and load again below if wanted.
                try:
                    await self.vllm.unload(name)
                except LoadRefused as error:
                    metrics.FAILURES.labels("unload").inc()
                    log.warning("could not unload %s: %s", name, error)
                    continue
                del actual[name]
        for name, entry in wanted.items():
            if name not in actual and not self._backing_off(name):
                await self._load(name, entry)
        self.failures = {n: f for n, f in self.failures.items() if n in wanted}
        ours = {name: digest for name, path in (await self.vllm.adapters()).items()
                if (digest := self.cache.digest_at(path))}
        self.cache.evict(pinned=set(ours.values()))
        metrics.ADAPTERS_LOADED.set(len(ours))
        metrics.GENERATION.set(desired.generation)
        return {"generation": desired.generation,
                "loaded": [{"served_name": n, "digest": d} for n, d in sorted(ours.items())],
                "failures": [{"served_name": n, "reason": f.reason} for n, f in sorted(self.failures.items())]}

    async def _load(self, name: str, entry: dict[str, Any]) -> None:
        started = time.monotonic()
        try:
            path = await self.cache.ensure(entry)
            await self.vllm.load(name, str(path))
        except (DigestMismatch, DownloadFailed, LoadRefused) as error:
            kind = {DigestMismatch: "digest", DownloadFailed: "download", LoadRefused: "vllm"}[type(error)]
            self.failures[name] = Failure(str(error), kind, time.monotonic())
            metrics.FAILURES.labels(kind).inc()
            log.warning("could not load %s: %s", name, error)
            return
        metrics.LOAD_SECONDS.observe(time.monotonic() - started)
        self.failures.pop(name, None)
        log.info("loaded %s in %.3f s", name, time.monotonic() - started)

    def _backing_off(self, name: str) -> bool:
        """Bad bytes and refused loads are not retried at every pass: the same bytes would fail
        the same way. A store that could not be reached is retried at once."""
        failure = self.failures.get(name)
        return (failure is not None and failure.kind != "download"
                and time.monotonic() - failure.at < self.retry_after_s)
