"""What the agent answers vLLM's resolver plugin (plugins/vllm-resolver) for an adapter vLLM does
not hold: the folder to load it from, only for a version of the active set this node took (its
signed set verified) whose attestation proves it, fetched through the verified cache exactly as a
pass fetches it (reconcile.py). Anything else is no adapter, and vLLM answers 404.

Three answers besides `resolved`, kept apart for the router:
- `unknown`: not an approved version of the pool's set (or retiring, or refused, or not proven);
- `unavailable`: approved, but its bytes could not be had within the deadline (the store or the
  registry away, the node's disk full). Recorded as the version's failure, which the node's
  report carries (reason "approved but unavailable: ..."), and counted in
  loraplane_agent_resolver_answers_total{answer="unavailable"};
- `refused`: approved, but the bytes are bad (they do not match the digest), or a load of the
  same bytes failed a moment ago.

A folder handed to vLLM stays as it is while the name is in the set: the cache pins it and the
passes check it (reconcile.py); a version that leaves the set is unloaded by the next pass and
never answered again."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from serving.agent import metrics
from serving.agent.artifacts import CacheUnwritable, DigestMismatch, DownloadFailed
from serving.agent.entries import SERVED_NAME_RE, shown
from serving.agent.integrity import Tampered
from serving.agent.reconcile import Failure, Reconciler
from serving.registry_client import ActiveSet

log = logging.getLogger(__name__)
UNAVAILABLE = "approved but unavailable: "


class OnDemand:
    def __init__(self, reconciler: Reconciler, desired: Callable[[], ActiveSet | None],
                 deadline_s: float) -> None:
        self.reconciler, self.desired, self.deadline_s = reconciler, desired, deadline_s

    async def resolve(self, name: str) -> dict[str, Any]:
        answer = await self._resolve(name)
        metrics.RESOLVER_ANSWERS.labels(answer["answer"]).inc()
        return answer

    async def _resolve(self, name: str) -> dict[str, Any]:
        if not SERVED_NAME_RE.fullmatch(name):
            return _no("unknown", f"{shown(name)} is not a version's served name (tenant/name@N)")
        desired = self.desired()
        if desired is None:
            return _no("unknown", "this node holds no active set yet")
        reconciler = self.reconciler
        entry = reconciler.verified_entries(desired).get(name)
        if entry is None:
            why = reconciler.refused.get(name) or reconciler.unproven.get(name) or \
                "not a version of the pool's approved active set"
            return _no("unknown", why)
        if entry.retiring:
            return _no("unknown", "retiring: it keeps only what it serves already")
        failure = reconciler.failures.get(name)
        if failure is not None and reconciler.backing_off(name):
            return _no("refused", failure.reason)
        started = time.monotonic()
        try:
            async with asyncio.timeout(self.deadline_s):
                path = await reconciler.fetch_verified(name, entry)
        except TimeoutError:
            return self._unavailable(name, f"not fetched within {self.deadline_s:g} s; still fetching")
        except (DownloadFailed, CacheUnwritable) as error:
            return self._unavailable(name, str(error))
        except (DigestMismatch, Tampered) as error:
            reconciler.failures[name] = Failure(str(error), "digest", time.monotonic())
            metrics.FAILURES.labels("digest").inc()
            log.warning("not resolving %s: %s", name, error)
            return _no("refused", str(error))
        except Exception:  # noqa: BLE001 - a bug answers no adapter; the socket goes on serving
            log.exception("could not resolve %s", name)
            metrics.FAILURES.labels("internal").inc()
            return _no("refused", "the agent failed on it; see its log")
        reconciler.demanded.add(name)
        reconciler.handed[name] = entry.digest
        reconciler.failures.pop(name, None)
        took = time.monotonic() - started
        metrics.RESOLVE_SECONDS.observe(took)
        log.info("resolved %s for vLLM in %.3f s", name, took)
        return {"answer": "resolved", "served_name": name, "path": str(path)}

    def _unavailable(self, name: str, reason: str) -> dict[str, Any]:
        """Approved, but not to be had now: the version's failure, in the node's report."""
        log.warning("%s is approved but could not be fetched: %s", name, reason)
        self.reconciler.failures[name] = Failure(UNAVAILABLE + reason, "download", time.monotonic())
        metrics.FAILURES.labels("download").inc()
        return _no("unavailable", reason)


def _no(answer: str, reason: str) -> dict[str, Any]:
    return {"answer": answer, "reason": reason[:1000]}
