"""The pool's nodes as the router sees them, and which one gets a request.

A node may get a served name only when its agent reports it loaded with the right digest, and
preferably when the registry's placement gives it that name (a node draining it is a fallback); a node
whose report is stale only when no fresh one has it, and a node that just failed only when no
other has it, for a short cooldown. Among those, the router prefers nodes where the adapter is
resident in vLLM's CPU cache (its own estimate: the last `max_cpu_loras` names it sent there),
and the fewest outstanding requests. An adapter resident nowhere goes to a node with a free slot,
else to its rendezvous-hash favourite, so each adapter keeps to few nodes and nodes do not evict
each other's working sets.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class Node:
    node_id: str
    url: str
    capacity: int  # vLLM's max_cpu_loras on this node
    serving: frozenset[str] = frozenset()
    stale: bool = False
    outstanding: int = 0
    down_until: float = 0.0
    resident: OrderedDict[str, None] = field(default_factory=OrderedDict)  # LRU estimate
    # vLLM 0.32 on CPU crashes when one step holds two prompt-logprob requests: one at a time.
    prompt_logprobs: asyncio.Lock = field(default_factory=asyncio.Lock)

    def has_room(self) -> bool:
        return len(self.resident) < self.capacity

    def touch(self, served_name: str) -> bool:
        """Record a request for `served_name`; False when it was not resident (a likely load)."""
        hit = served_name in self.resident
        self.resident[served_name] = None
        self.resident.move_to_end(served_name)
        while len(self.resident) > self.capacity:
            self.resident.popitem(last=False)
        return hit


class Fleet:
    def __init__(self, spill_outstanding: int) -> None:
        self.nodes: dict[str, Node] = {}
        # served name -> the nodes the registry's placement gives it; absent: every node
        self.placed: dict[str, frozenset[str]] = {}
        self.spill_outstanding = spill_outstanding
        self._updated = asyncio.Event()

    async def changed(self) -> None:
        """Return at the next update of the nodes' reports."""
        await self._updated.wait()

    def update(self, reports: list[dict[str, Any]]) -> None:
        """Take the registry's view of the nodes, keeping what the router itself observed."""
        seen = {}
        for report in reports:
            if not report.get("vllm_url"):
                continue
            node = self.nodes.get(report["node_id"])
            url, capacity = report["vllm_url"].rstrip("/"), (report.get("limits") or {}).get("max_cpu_loras", 1)
            if node is None or node.url != url:
                node = Node(report["node_id"], url, capacity)
            node.capacity, node.stale = max(1, capacity), report["stale"]
            node.serving = frozenset(report.get("serving", ()))
            for name in [n for n in node.resident if n not in node.serving]:
                del node.resident[name]  # unloaded: no longer resident
            seen[node.node_id] = node
        self.nodes = seen
        self._updated.set()
        self._updated = asyncio.Event()

    def follow_placement(self, entries: list[dict[str, Any]]) -> None:
        self.placed = {e["served_name"]: frozenset(e["nodes"]) for e in entries if e.get("nodes") is not None}

    def choose(self, served_name: str, exclude: set[str] = frozenset()) -> Node | None:
        now = time.monotonic()
        holders = [n for n in self.nodes.values() if served_name in n.serving and n.node_id not in exclude]
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
        roomy = [n for n in candidates if n.has_room()]
        if roomy:
            return min(roomy, key=lambda n: (n.outstanding, -_rendezvous(served_name, n.node_id)))
        return max(candidates, key=lambda n: _rendezvous(served_name, n.node_id))

    def mark_down(self, node: Node, cooldown_s: float) -> None:
        node.down_until = time.monotonic() + cooldown_s


def _load(node: Node) -> int:
    return node.outstanding


def _rendezvous(served_name: str, node_id: str) -> int:
    digest = hashlib.blake2b(f"{served_name}\0{node_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")
