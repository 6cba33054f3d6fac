"""The pool's nodes as the router sees them, and which one gets a request.

A node may get a served name only when its agent reports it loaded with the right digest and the
node's engine itself, asked at the node's address, lists it loaded from a folder named by that
digest (engines.py); and preferably when the registry's placement gives it
that name (a node draining it is a fallback); a node
whose report is stale only when no fresh one has it, and a node that just failed only when no
other has it, for a short cooldown. Among those, the router prefers nodes where the adapter is
resident in vLLM's CPU cache (its own estimate: the last `max_cpu_loras` names it sent there),
and the fewest outstanding requests. An adapter resident nowhere goes to a node with a free slot,
else to its rendezvous-hash favourite, so each adapter keeps to few nodes and nodes do not evict
each other's working sets.

In a pool whose overflow is on_demand, a version no node holds is sent "cold" (`choose_cold`) to a
live node by the same rule: its vLLM asks the node's agent through the resolver plugin, which
loads only a version of the node's verified, signed active set. The answer's engine is then
confirmed like any other before the node counts as a holder.

A node's address is the one an admin bound to it (the registry's reports carry it), or, on
Kubernetes, its pod's in the pool's EndpointSlices (`locate`): then a node needs both a ready
endpoint and a report, and a node whose address changes is a new node, confirmed afresh.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from serving.router import metrics
from serving.router.engines import EngineCheck

log = logging.getLogger("loraplane.router")
CHECK_BACKOFF_MAX_S = 10


@dataclass(eq=False)
class Node:
    node_id: str
    url: str
    capacity: int  # vLLM's max_cpu_loras on this node
    serving: frozenset[str] = frozenset()  # what its agent reports
    confirmed: frozenset[str] = frozenset()  # what its engine itself listed, of those
    stale: bool = False
    outstanding: int = 0
    down_until: float = 0.0
    resident: OrderedDict[str, None] = field(default_factory=OrderedDict)  # LRU estimate
    next_check: float = 0.0  # when the engine may be asked again about unconfirmed names
    failed_checks: int = 0
    # vLLM 0.32 on CPU crashes when one step holds two prompt-logprob requests: one at a time.
    prompt_logprobs: asyncio.Lock = field(default_factory=asyncio.Lock)

    def has_room(self) -> bool:
        return len(self.resident) < self.capacity

    def lost(self, served_name: str) -> None:
        """The engine answered that it does not hold `served_name`: ask it again before use."""
        self.serving = self.serving - {served_name}
        self.confirmed = self.confirmed - {served_name}

    def touch(self, served_name: str) -> bool:
        """Record a request for `served_name`; False when it was not resident (a likely load)."""
        hit = served_name in self.resident
        self.resident[served_name] = None
        self.resident.move_to_end(served_name)
        while len(self.resident) > self.capacity:
            self.resident.popitem(last=False)
        return hit


class Fleet:
    def __init__(self, spill_outstanding: int, addresses_from_platform: bool = False) -> None:
        self.nodes: dict[str, Node] = {}
        self.reports: list[dict[str, Any]] = []  # the registry's, as last read
        # node id -> address, from the platform; None: the addresses in the registry's reports
        self.addresses: dict[str, str] | None = {} if addresses_from_platform else None
        # served name -> the nodes the registry's placement gives it; absent: every node
        self.placed: dict[str, frozenset[str]] = {}
        self.digests: dict[str, str] = {}  # served name -> digest, from the active set
        self.cold_allowed: frozenset[str] = frozenset()  # may go to a node that does not hold it
        self.spill_outstanding = spill_outstanding
        self._updated = asyncio.Event()

    async def changed(self) -> None:
        """Return at the next update of the nodes' reports or addresses."""
        await self._updated.wait()

    def update(self, reports: list[dict[str, Any]]) -> None:
        """Take the registry's view of the nodes, keeping what the router itself observed."""
        self.reports = reports
        self._join()

    def locate(self, addresses: dict[str, str]) -> None:
        """Take the platform's view of where each node's engine is (node id -> address)."""
        self.addresses = addresses
        self._join()

    def _join(self) -> None:
        seen = {}
        for report in self.reports:
            address = report.get("vllm_url") if self.addresses is None else self.addresses.get(report["node_id"])
            if not address:
                continue
            node = self.nodes.get(report["node_id"])
            url, capacity = address.rstrip("/"), (report.get("limits") or {}).get("max_cpu_loras", 1)
            if node is None or node.url != url:
                node = Node(report["node_id"], url, capacity)
            node.capacity, node.stale = max(1, capacity), report["stale"]
            node.serving = frozenset(report.get("serving", ()))
            node.confirmed = node.confirmed & node.serving
            for name in [n for n in node.resident if n not in node.serving]:
                del node.resident[name]  # unloaded: no longer resident
            seen[node.node_id] = node
        self.nodes = seen
        metrics.NODES.set(len(seen))
        self._updated.set()
        self._updated = asyncio.Event()

    def follow_active_set(self, entries: list[dict[str, Any]], *, on_demand: bool = False) -> None:
        """`on_demand`: the pool's overflow is on_demand, so any node may load any of its
        versions but a retiring one at its first request."""
        self.placed = {e["served_name"]: frozenset(e["nodes"]) for e in entries if e.get("nodes") is not None}
        self.digests = {e["served_name"]: e["digest"] for e in entries}
        self.cold_allowed = frozenset(e["served_name"] for e in entries if not e.get("retiring")) \
            if on_demand else frozenset()
        for node in self.nodes.values():  # names unknown until now may be confirmed at once
            node.next_check = 0.0

    async def confirm(self, check: EngineCheck) -> None:
        """Ask each node's engine about the names its agent reports and the engine has not yet
        listed; a node whose engine disagrees is asked again later, less and less often."""
        due = self.due_for_check()
        if not due:
            return
        answers = await asyncio.gather(*(check.holdings(node.url) for node in due))
        for node, holdings in zip(due, answers, strict=True):
            self.judge(node, holdings)
        self._updated.set()
        self._updated = asyncio.Event()

    def due_for_check(self) -> list[Node]:
        now = time.monotonic()
        return [n for n in self.nodes.values() if n.serving - n.confirmed and now >= n.next_check]

    def judge(self, node: Node, holdings: dict[str, str] | None) -> None:
        """Take what `node`'s engine listed (served name -> digest; None: it could not be asked,
        and what it confirmed before stays confirmed: a 404 for a name takes that one back)."""
        if holdings is not None:
            node.confirmed = frozenset(name for name in node.serving
                                       if name in self.digests and holdings.get(name) == self.digests[name])
        unconfirmed = node.serving - node.confirmed
        outcome = "unreachable" if holdings is None else "refuted" if unconfirmed else "confirmed"
        metrics.ENGINE_CHECKS.labels(node.node_id, outcome).inc()
        if not unconfirmed:
            node.failed_checks = 0
            return
        node.failed_checks += 1
        node.next_check = time.monotonic() + min(CHECK_BACKOFF_MAX_S, 0.1 * 2 ** node.failed_checks)
        if holdings is not None and node.failed_checks == 1:
            log.warning("node %s reports %d names its engine does not list as loaded from their "
                        "digest (%s): none of them is sent there", node.node_id, len(unconfirmed),
                        ", ".join(sorted(unconfirmed)[:5]))

    def choose(self, served_name: str, exclude: frozenset[str] | set[str] = frozenset()) -> Node | None:
        now = time.monotonic()
        holders = [n for n in self.nodes.values() if served_name in n.confirmed and n.node_id not in exclude]
        up = [n for n in holders if now >= n.down_until]
        # A stale report (its agent or the registry is away) still names what that vLLM holds,
        # and a served name is one immutable version: use such nodes only when no other has it.
        # A node cooling down after a failure is the last resort, so that one failed connection
        # does not turn into refusals for the whole cooldown when it is the only holder.
        candidates = [n for n in up if not n.stale] or up or holders
        if not candidates:
            return None
        # A node that drains the adapter while another loads it serves it only until then.
        placed = self.placed.get(served_name)
        if placed is not None:
            candidates = [n for n in candidates if n.node_id in placed] or candidates
        resident = [n for n in candidates if served_name in n.resident]
        if resident:
            best = min(resident, key=_load)
            if best.outstanding < self.spill_outstanding:
                return best
            roomy = [n for n in candidates if n not in resident and n.has_room()
                     and n.outstanding < best.outstanding]
            return min(roomy, key=_load) if roomy else best
        return _roomy_or_favourite(served_name, candidates)

    def choose_cold(self, served_name: str, exclude: frozenset[str] | set[str] = frozenset()) -> Node | None:
        """A node to load `served_name` on demand: a live one (fresh report, not cooling down)
        with a free slot, else its rendezvous favourite. None when the pool does not load on
        demand, or no node is live."""
        if served_name not in self.cold_allowed:
            return None
        now = time.monotonic()
        live = [n for n in self.nodes.values()
                if not n.stale and now >= n.down_until and n.node_id not in exclude]
        return _roomy_or_favourite(served_name, live) if live else None

    def mark_down(self, node: Node, cooldown_s: float) -> None:
        node.down_until = time.monotonic() + cooldown_s


def _roomy_or_favourite(served_name: str, candidates: list[Node]) -> Node:
    roomy = [n for n in candidates if n.has_room()]
    if roomy:
        return min(roomy, key=lambda n: (n.outstanding, -_rendezvous(served_name, n.node_id)))
    return max(candidates, key=lambda n: _rendezvous(served_name, n.node_id))


def _load(node: Node) -> int:
    return node.outstanding


def _rendezvous(served_name: str, node_id: str) -> int:
    digest = hashlib.blake2b(f"{served_name}\0{node_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")
