"""Where each adapter of a pool's active set lives, once the set outgrows what one node keeps
resident (its vLLM's `max_cpu_loras`). Pure functions: no database, no clock.

- While every node can hold the whole set (or no node is live yet), every node holds it all.
- Otherwise each adapter gets k replicas, k = ⌈share × N⌉ between 1 and N, from its share of the
  pool's traffic: an adapter with a quarter of the traffic of 8 nodes needs 2 nodes' worth.
- Replicas go by rendezvous hashing: an adapter ranks the nodes by hash(adapter, node) and takes
  the first ones with room. A node joining or leaving changes the ranking of no other pair, so
  only about 1/N of the adapters move.
- No node is given more than its capacity. Every adapter's first replica is placed before any
  adapter's second, so extra copies never crowd out an adapter; and when the pool has more
  adapters than slots, the least used go unplaced (the promotion gates keep this rare).
- Moves are gradual: a node keeps an adapter that moved away (it is "draining") until every node
  now meant to hold it reports it loaded, as long as it has room beside its own targets.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

EVERYWHERE, SPREAD = "everywhere", "spread"


@dataclass(frozen=True)
class Placement:
    mode: str  # EVERYWHERE or SPREAD
    targets: dict[str, frozenset[str]]  # node id -> served names it should hold
    replicas: dict[str, int]  # served name -> replicas wanted
    shares: dict[str, float]  # served name -> share of the pool's traffic
    unplaced: tuple[str, ...] = ()
    draining: dict[str, frozenset[str]] = field(default_factory=dict)  # node id -> moving away

    def served_by(self, node_id: str) -> frozenset[str]:
        """What the node should hold now: its targets and what it still drains."""
        return self.targets.get(node_id, frozenset()) | self.draining.get(node_id, frozenset())

    def nodes_of(self, served_name: str) -> list[str]:
        return sorted(node for node, names in self.targets.items() if served_name in names)


def place(names: Iterable[str], capacities: Mapping[str, int], traffic: Mapping[str, float],
          previous: Placement | None = None, retiring: Iterable[str] = ()) -> Placement:
    """The targets of each node. `capacities`: live node id -> adapters it keeps resident;
    `traffic`: served name -> requests per second (absent or zero is fine); `previous`: the
    placement this one replaces, whose assignments are kept unless a node that joined since
    outranks theirs, so that nothing else moves. `retiring`: names that stay only while traffic
    moves off them; they do not count when deciding whether the set still fits on every node,
    or every replacement of a version in a full pool would spread the set and gather it again."""
    names = sorted(set(names))
    shares = shares_of(names, traffic)
    staying = len(set(names) - set(retiring))
    if all(staying <= capacity for capacity in capacities.values()):  # also with no node yet
        everything = frozenset(names)
        return Placement(EVERYWHERE, {node: everything for node in capacities},
                         {name: len(capacities) for name in names}, shares)
    # More adapters than slots: the least used wait (the promotion gates keep this rare).
    slots = sum(capacities.values())
    by_use = sorted(names, key=lambda name: (-shares[name], name))
    unplaced, names = sorted(by_use[slots:]), sorted(by_use[:slots])
    replicas = replica_counts(names, capacities, traffic)
    free = dict(capacities)
    targets: dict[str, set[str]] = {node: set() for node in capacities}
    # A fixed order that traffic does not change: popularity decides how many, never where.
    order = sorted(names, key=_order_key)
    if previous is not None and previous.mode == SPREAD:
        # Keep what nodes hold, except where a node that joined is now among an adapter's k
        # favourites: then the holder that is not among them gives it up. So a join moves about
        # k/N of the adapters, a departure only what the node held, and nothing else moves.
        joined = set(capacities) - set(previous.targets)
        for name in order:
            ranked = ranking(name, capacities)
            favourites = ranked[:replicas[name]]
            wanted_by_newcomer = not joined.isdisjoint(favourites)
            for node in ranked:
                if name not in previous.targets.get(node, ()):
                    continue
                if wanted_by_newcomer and node not in favourites:
                    continue
                if free[node] == 0 or len(_holders(targets, name)) >= replicas[name]:
                    continue
                targets[node].add(name)
                free[node] -= 1
    # Everyone's first copy, then second copies: there is a slot for every first copy; an extra
    # copy that finds no node with room beside its others is left out.
    for replica in range(max(replicas.values(), default=0)):
        for name in order:
            if len(_holders(targets, name)) > replica or replicas[name] <= replica:
                continue
            chosen = next((n for n in ranking(name, capacities) if free[n] > 0 and name not in targets[n]), None)
            if chosen is not None:
                targets[chosen].add(name)
                free[chosen] -= 1
    placed_replicas = {name: len(_holders(targets, name)) for name in names}
    return Placement(SPREAD, {node: frozenset(t) for node, t in targets.items()}, placed_replicas,
                     shares, tuple(sorted(unplaced)))


def _holders(targets: dict[str, set[str]], name: str) -> list[str]:
    return [node for node, held in targets.items() if name in held]


def with_draining(new: Placement, previous: Placement | None, capacities: Mapping[str, int],
                  loaded: Mapping[str, frozenset[str]]) -> Placement:
    """`new`, where each node also keeps what it held under `previous` and no longer targets,
    until every node now meant to hold that adapter reports it loaded (`loaded`: node id ->
    served names it reports loaded). Kept only while the node has room; most replicas first."""
    if previous is None or new.mode == EVERYWHERE:
        return new
    draining = {}
    for node, capacity in capacities.items():
        room = capacity - len(new.targets.get(node, ()))
        # Under "everywhere" a node held the whole set: what it reports loaded says what it has.
        had = previous.served_by(node) if previous.mode == SPREAD else loaded.get(node, frozenset())
        held = had - new.targets.get(node, frozenset())
        waiting = [name for name in held if name in new.shares and
                   not all(name in loaded.get(other, ()) for other in new.nodes_of(name))]
        waiting.sort(key=lambda name: (-new.replicas.get(name, 0), name))
        if room > 0 and waiting:
            draining[node] = frozenset(waiting[:room])
    return Placement(new.mode, new.targets, new.replicas, new.shares, new.unplaced, draining)


def moved(before: Placement, after: Placement) -> set[str]:
    """Served names that some node must load because of the change: targeted by a node that
    did not target them before."""
    return {name for name in after.replicas
            if set(after.nodes_of(name)) - set(before.nodes_of(name))}


def ranking(name: str, nodes: Iterable[str]) -> list[str]:
    """The nodes in `name`'s order of preference (rendezvous hashing)."""
    return sorted(nodes, key=lambda node: _score(name, node), reverse=True)


def shares_of(names: list[str], traffic: Mapping[str, float]) -> dict[str, float]:
    rates = {name: max(0.0, float(traffic.get(name, 0.0))) for name in names}
    total = sum(rates.values())
    if total <= 0:
        return {name: 1 / len(names) for name in names} if names else {}
    return {name: rate / total for name, rate in rates.items()}


def replica_counts(names: list[str], capacities: Mapping[str, int], traffic: Mapping[str, float]) -> dict[str, int]:
    """k = ⌈share × N⌉ for each name, between 1 and N, trimmed to fit the nodes' slots."""
    shares = shares_of(names, traffic)
    nodes = len(capacities)
    wanted = {name: min(nodes, max(1, math.ceil(shares[name] * nodes - 1e-9))) for name in names}
    excess = sum(wanted.values()) - sum(capacities.values())
    while excess > 0:  # trim the extra copies that serve the least traffic each
        extra = [name for name in names if wanted[name] > 1]
        if not extra:
            break
        victim = min(extra, key=lambda name: (shares[name] / wanted[name], name))
        wanted[victim] -= 1
        excess -= 1
    return wanted


def capacity(pool_max_cpu_loras: int, limits: dict | None) -> int:
    """Adapters a node keeps resident: its vLLM's max_cpu_loras, at most the pool's."""
    return min(pool_max_cpu_loras, (limits or {}).get("max_cpu_loras") or pool_max_cpu_loras)


def _score(name: str, node: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{name}\0{node}".encode(), digest_size=8).digest(), "big")


def _order_key(name: str) -> bytes:
    return hashlib.blake2b(name.encode(), digest_size=8).digest()
