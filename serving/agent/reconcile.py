"""One reconcile pass: compare the desired set with what vLLM really holds, load what is missing
(downloaded and verified first), unload what this agent loaded and is no longer wanted, and
return the status to report. Adapters loaded at vLLM's start are never touched: the agent manages
only adapters whose files live in its own cache, which is also how it adopts, after a restart,
what it had loaded before.

Each version fails on its own: a refused entry, bad bytes, a full disk or a refused load is
recorded as that version's failure with its reason, and the pass goes on with the others and
returns its status, so the node still reports. Only vLLM being away ends a pass early."""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from typing import Any

from serving.agent import entries, metrics
from serving.agent.artifacts import AdapterCache, CacheUnwritable, DigestMismatch, DownloadFailed
from serving.agent.entries import Entry
from serving.agent.vllm_client import LoadRefused, VllmClient, VllmUnavailable
from serving.registry_client import ActiveSet

log = logging.getLogger(__name__)
KINDS = {DigestMismatch: "digest", DownloadFailed: "download", CacheUnwritable: "disk",
         LoadRefused: "vllm"}
# What the registry accepts as a failure's reason: no control characters but tabs and newlines.
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@dataclass
class Failure:
    reason: str
    kind: str  # digest | download | disk | vllm | internal
    at: float


class Reconciler:
    def __init__(self, vllm: VllmClient, cache: AdapterCache, *, retry_failed_after_s: float) -> None:
        self.vllm, self.cache, self.retry_after_s = vllm, cache, retry_failed_after_s
        self.failures: dict[str, Failure] = {}
        self.refused: dict[str, str] = {}  # entries the agent would not use, and why
        self.unnamed: list[str] = []  # the same, for entries without a served name to report under

    async def run_pass(self, desired: ActiveSet) -> dict[str, Any]:
        """Raises VllmUnavailable when vLLM cannot be asked (it is down or restarting)."""
        metrics.PASSES.inc()
        parsed = entries.parse(desired.entries)
        self._note_refusals(parsed)
        wanted = parsed.wanted
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
        try:
            self.cache.evict(pinned=set(ours.values()))
        except OSError as error:  # the cache folder itself is unreadable: nothing to evict now
            log.warning("could not evict from the cache: %s", error)
        metrics.ADAPTERS_LOADED.set(len(ours))
        metrics.GENERATION.set(desired.generation)
        reasons = {**self.refused, **{n: f.reason for n, f in self.failures.items()}}
        return {"generation": desired.generation,
                "loaded": [{"served_name": n, "digest": d} for n, d in sorted(ours.items())],
                "failures": [{"served_name": n, "reason": _reportable(r)}
                             for n, r in sorted(reasons.items())]}

    async def _load(self, name: str, entry: Entry) -> None:
        started = time.monotonic()
        try:
            path = await self.cache.ensure(entry)
            await self.vllm.load(name, str(path))
        except VllmUnavailable:
            raise
        except Exception as error:  # noqa: BLE001 - one version's failure must not stop the others
            kind = KINDS.get(type(error), "internal")
            if kind == "internal":
                log.exception("could not load %s", name)
            else:
                log.warning("could not load %s: %s", name, error)
            reason = str(error) or type(error).__name__
            self.failures[name] = Failure(reason, kind, time.monotonic())
            metrics.FAILURES.labels(kind).inc()
            return
        metrics.LOAD_SECONDS.observe(time.monotonic() - started)
        self.failures.pop(name, None)
        log.info("loaded %s in %.3f s", name, time.monotonic() - started)

    def _note_refusals(self, parsed: entries.Parsed) -> None:
        """Log and count each refused entry once, not at every pass."""
        for name, reason in parsed.refused.items():
            if self.refused.get(name) != reason:
                log.warning("%s: %s", name, reason)
                metrics.FAILURES.labels("refused_entry").inc()
        if parsed.unnamed != self.unnamed:
            for reason in parsed.unnamed:
                log.warning("%s", reason)
        self.refused, self.unnamed = parsed.refused, parsed.unnamed

    def _backing_off(self, name: str) -> bool:
        """Bad bytes, a full disk and refused loads are not retried at every pass: the same bytes
        would fail the same way. A store that could not be reached is retried at once."""
        failure = self.failures.get(name)
        return (failure is not None and failure.kind != "download"
                and time.monotonic() - failure.at < self.retry_after_s)


def _reportable(reason: str) -> str:
    """A reason the registry will take: vLLM's and the disk's words may hold anything."""
    text = CONTROL.sub("?", reason.encode("utf-8", "replace").decode("utf-8"))
    return text[:2000] or "unknown"
