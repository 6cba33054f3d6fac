"""One reconcile pass: compare the desired set with what vLLM really holds, load what is missing
(proven, downloaded and verified first), unload what this agent loaded and is no longer wanted,
and return the status to report. Adapters loaded at vLLM's start are never touched: the agent
manages only adapters whose files live in its own cache, which is also how it adopts, after a
restart, what it had loaded before.

Each version fails on its own: a refused entry, an attestation that does not prove it, bad bytes,
a full disk or a refused load is recorded as that version's failure with its reason, and the pass
goes on with the others and returns its status, so the node still reports. Only vLLM being away
ends a pass early.

Never half-applied: an entry that is not proven is neither loaded nor, when an earlier proof let
it load, unloaded; the node keeps what it had until the set proves something else or drops it.

Cached bytes are checked again before every load and, while vLLM holds them, at every pass
(artifacts.py). Bytes that changed are unloaded, removed and reported as an incident, and fresh
ones are fetched and loaded in the same pass.

With `load_ahead` off, or for an entry marked `on_demand` (the long tail of a pool whose overflow is
on_demand, which the placement does not give this node), a version is loaded only once vLLM's
resolver has asked for it (on_demand.py
answers, through `fetch_verified` like a pass); from then on each pass treats it as any other: it
stays loaded while it is in the set, is checked, reloaded after a vLLM restart, and unloaded when
it leaves."""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from serving.agent import entries, metrics
from serving.agent.artifacts import (
    AdapterCache, CacheUnwritable, DigestMismatch, DownloadFailed, FolderChanged,
)
from serving.agent.entries import Entry
from serving.agent.incidents import Incidents
from serving.agent.integrity import Tampered
from serving.agent.proof import ProofCheck
from serving.agent.vllm_client import LoadRefused, VllmClient, VllmUnavailable
from serving.registry_client import ActiveSet

log = logging.getLogger(__name__)
KINDS = {DigestMismatch: "digest", DownloadFailed: "download", CacheUnwritable: "disk",
         FolderChanged: "changed",
         LoadRefused: "vllm", Tampered: "tampered"}
# A store away, or a folder that changed under vLLM (its bytes are checked again before a load).
RETRIED_AT_ONCE = {"download", "changed"}
# What the registry accepts as a failure's reason: no control characters but tabs and newlines.
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@dataclass
class Failure:
    reason: str
    kind: str  # digest | download | disk | vllm | tampered | internal
    at: float


class Reconciler:
    def __init__(self, vllm: VllmClient, cache: AdapterCache, *, retry_failed_after_s: float,
                 proof: ProofCheck | None, incidents: Incidents | None = None,
                 load_ahead: bool = True) -> None:
        """`proof` None: attestations are not checked (only to measure what checking costs)."""
        self.vllm, self.cache, self.retry_after_s = vllm, cache, retry_failed_after_s
        self.proof, self.incidents = proof, incidents or Incidents()
        self.failures: dict[str, Failure] = {}
        self.refused: dict[str, str] = {}  # entries the agent would not use, and why
        self.unnamed: list[str] = []  # the same, for entries without a served name to report under
        self.unproven: dict[str, str] = {}  # entries whose attestation did not prove them, and why
        self.proven: dict[str, Entry] = {}  # the entry each managed name was last proven as
        self.load_ahead = load_ahead
        self.demanded: set[str] = set()  # names the resolver was asked for: loaded from then on
        self.handed: dict[str, str] = {}  # name -> digest of folders handed to vLLM's resolver
        self._verified: tuple[ActiveSet, dict[str, Entry]] | None = None
        self._parsed: tuple[ActiveSet, entries.Parsed] | None = None
        self._fetching: dict[str, asyncio.Future[Path]] = {}  # digest -> the fetch under way

    async def run_pass(self, desired: ActiveSet) -> dict[str, Any]:
        """Raises VllmUnavailable when vLLM cannot be asked (it is down or restarting)."""
        metrics.PASSES.inc()
        with metrics.PASS_SECONDS.time():
            return await self._run_pass(desired)

    async def _run_pass(self, desired: ActiveSet) -> dict[str, Any]:
        parsed = self._parse(desired)
        self._note_refusals(parsed)
        self._note_unproven(self.proof.refusals(parsed.wanted, desired.signed) if self.proof else {})
        wanted = {name: entry for name, entry in parsed.wanted.items() if name not in self.unproven}
        self._verified = (desired, wanted)
        actual = await self.vllm.adapters()
        # What vLLM may go on holding: the proven set, and what an earlier proof let it load.
        keep = {name: self.proven[name] for name in self.unproven if name in self.proven} | wanted
        for name, path in list(actual.items()):
            if not self.cache.owns(path):
                # Another folder under a served name of the set would answer for the approved
                # version; under any other name it is not ours to touch (a static adapter).
                if name in keep and await self._unload(name):
                    self._foreign(name, path)
                    del actual[name]
                continue
            entry = keep.get(name)
            if entry is None or self.cache.digest_at(path) != entry.digest:
                # Not wanted any more, or its files are gone from the cache (vLLM would fail to
                # reload it after evicting it): unload, and load again below if wanted.
                if await self._unload(name):
                    del actual[name]
                continue
            try:
                await self.cache.check_loaded(entry)
            except Tampered as tampered:  # vLLM may already have reloaded the bytes: out first
                await self._unload(name)
                self._tampered(name, entry, tampered)
                actual.pop(name)
            except FolderChanged as changed:  # out, then loaded below once its bytes verify
                if await self._unload(name):
                    actual.pop(name)
                self._changed(name, str(changed))
            except OSError as error:  # the folder vanished or cannot be read: fetch it again
                log.warning("the cached folder of %s cannot be checked (%s); loading it again", name, error)
                if await self._unload(name):
                    self.cache.discard(entry.digest)
                    del actual[name]
        self.proven = {name: entry for name, entry in keep.items() if name in actual} | wanted
        self.demanded &= wanted.keys()
        self.handed = {name: digest for name, digest in self.handed.items() if name in wanted}
        for name, entry in wanted.items():
            ahead = self.load_ahead and not entry.on_demand
            if name not in actual and (ahead or name in self.demanded) and not self.backing_off(name):
                await self._load(name, entry)
        self.failures = {n: f for n, f in self.failures.items() if n in wanted}
        ours = {name: digest for name, path in (await self.vllm.adapters()).items()
                if (digest := self.cache.digest_at(path))}
        try:
            # Nor a folder handed to the resolver: vLLM may be loading from it now.
            self.cache.evict(pinned=set(ours.values()) | set(self.handed.values()))
        except OSError as error:  # the cache folder itself is unreadable: nothing to evict now
            log.warning("could not evict from the cache: %s", error)
        metrics.ADAPTERS_LOADED.set(len(ours))
        metrics.GENERATION.set(desired.generation)
        reasons = {**self.refused, **self.unproven, **{n: f.reason for n, f in self.failures.items()}}
        return {"generation": desired.generation,
                "loaded": [{"served_name": n, "digest": d} for n, d in sorted(ours.items())],
                "failures": [{"served_name": n, "reason": _reportable(r)}
                             for n, r in sorted(reasons.items())],
                "incidents": [{**i, "reason": _reportable(i["reason"])} for i in self.incidents.current()]}

    def verified_entries(self, desired: ActiveSet) -> dict[str, Entry]:
        """The entries of `desired` that are proven: the last pass's answer for the same set,
        else checked now as a pass checks them (a set taken since, not yet applied)."""
        if self._verified is not None and self._verified[0] is desired:
            return self._verified[1]
        parsed = self._parse(desired)
        unproven = self.proof.refusals(parsed.wanted, desired.signed) if self.proof else {}
        return {name: entry for name, entry in parsed.wanted.items() if name not in unproven}

    def _parse(self, desired: ActiveSet) -> entries.Parsed:
        """`desired`'s entries, parsed once per set: passes and the resolver ask again and again."""
        if self._parsed is None or self._parsed[0] is not desired:
            self._parsed = (desired, entries.parse(desired.entries))
        return self._parsed[1]

    async def fetch_verified(self, name: str, entry: Entry) -> Path:
        """The folder to load `entry` from, its bytes verified now (artifacts.py); cached bytes
        that changed are an incident, removed, and fetched again. One fetch per digest at a
        time, however many passes and resolver requests want it; a caller that gives up (a
        deadline) leaves it running for the others."""
        flight = self._fetching.get(entry.digest)
        if flight is None:
            flight = asyncio.ensure_future(self._fetch_verified(name, entry))
            self._fetching[entry.digest] = flight
            flight.add_done_callback(functools.partial(self._landed, entry.digest))
        return await asyncio.shield(flight)

    def _landed(self, digest: str, flight: asyncio.Future[Path]) -> None:
        if self._fetching.get(digest) is flight:
            del self._fetching[digest]
        if not flight.cancelled():
            flight.exception()  # retrieved: the callers that waited have seen it; none may have

    async def _fetch_verified(self, name: str, entry: Entry) -> Path:
        try:
            return await self.cache.ensure(entry)
        except Tampered as tampered:
            self._tampered(name, entry, tampered)
            return await self.cache.ensure(entry)  # fresh bytes, verified as they arrive

    async def _unload(self, name: str) -> bool:
        try:
            await self.vllm.unload(name)
            return True
        except LoadRefused as error:
            metrics.FAILURES.labels("unload").inc()
            log.warning("could not unload %s: %s", name, error)
            return False

    def _foreign(self, name: str, path: str) -> None:
        reason = (f"vLLM held {name} loaded from {path[:300]!r}, a folder outside this node's verified "
                  "cache; unloaded, to be loaded from the approved bytes")
        log.error("%s", reason)
        self.incidents.record(name, "foreign", reason)
        metrics.FAILURES.labels("foreign").inc()

    def _changed(self, name: str, reason: str) -> None:
        log.error("%s: %s", name, reason)
        self.incidents.record(name, "changed", reason)
        metrics.FAILURES.labels("changed").inc()

    def _tampered(self, name: str, entry: Entry, tampered: Tampered) -> None:
        """Bytes verified before are not what is on the disk now: never load them again."""
        log.error("%s: %s; removing the cached copy and fetching the approved bytes again", name, tampered)
        self.cache.discard(entry.digest)
        self.incidents.record(name, "tampered", str(tampered))
        metrics.FAILURES.labels("tampered").inc()

    async def _load(self, name: str, entry: Entry) -> None:
        started = time.monotonic()
        try:
            path = await self.fetch_verified(name, entry)
            await self.vllm.load(name, str(path))
            if not self.cache.unchanged(entry):
                # Changed between its last hash and vLLM reading it: what vLLM read is unknown.
                await self._unload(name)
                raise FolderChanged(f"the cached folder of {name} changed while vLLM was loading it; "
                                    "unloaded, to be loaded again once its bytes verify")
        except VllmUnavailable:
            raise
        except Exception as error:  # noqa: BLE001 - one version's failure must not stop the others
            kind = KINDS.get(type(error), "internal")
            if kind == "internal":
                log.exception("could not load %s", name)
            else:  # vLLM's and the disk's words may hold terminal escapes or unencodable text
                log.warning("could not load %s: %s", name, _reportable(str(error)))
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

    def _note_unproven(self, unproven: dict[str, str]) -> None:
        for name, reason in unproven.items():
            if self.unproven.get(name) != reason:
                log.warning("%s: %s", name, reason)
                metrics.FAILURES.labels("attestation").inc()
        self.unproven = unproven

    def backing_off(self, name: str) -> bool:
        """Bad bytes, a full disk and refused loads are not retried at every pass: the same bytes
        would fail the same way. A store that could not be reached is retried at once."""
        failure = self.failures.get(name)
        return (failure is not None and failure.kind not in RETRIED_AT_ONCE
                and time.monotonic() - failure.at < self.retry_after_s)


def _reportable(reason: str) -> str:
    """A reason the registry will take: vLLM's and the disk's words may hold anything."""
    text = CONTROL.sub("?", reason.encode("utf-8", "replace").decode("utf-8"))
    return text[:2000] or "unknown"
