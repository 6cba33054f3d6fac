"""Place a pool's active set on its nodes (placement/rules.py) and store the result on the pool
row, where the active-set answer reads it. Called when a change to the set finishes
(change.py), under the pool's lock that change holds."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

from sqlalchemy.orm import Session

from registry.active_set import repository
from registry.active_set.reading.snapshot import desired_digests, retiring_names
from registry.placement import repository as traffic_reports
from registry.placement.rules import capacity, place, with_draining
from registry.placement.stored import as_stored, from_stored, to_stored
from registry.rows import existing
from registry.tables import Pool


def store_if_moved(session: Session, pool_id: int) -> bool:
    """Store the placement the pool should have now, if it differs. True if stored."""
    pool = existing(session, Pool, pool_id)
    if not differs(session, pool):
        return False
    # Again under the pool's lock, so that two reports racing neither store each other's view
    # nor bump the generation twice for one change.
    repository.lock_pool(session, pool_id)
    session.refresh(pool)
    placement = computed(session, pool)
    if placement == as_stored(pool.placement):
        return False
    pool.placement = placement
    session.flush()
    return True


def differs(session: Session, pool: Pool) -> bool:
    return computed(session, pool) != as_stored(pool.placement)


def computed(session: Session, pool: Pool) -> dict:
    """The stored form of the placement the pool should have now."""
    nodes = repository.live_nodes(session, pool.id)
    loaded = {n.node_id: tuple(sorted(a["served_name"] for a in n.loaded)) for n in nodes}
    rates = traffic_reports.recent_traffic(session, pool.id)
    return _placed(Inputs(
        names=tuple(sorted(desired_digests(session, pool.id))),
        retiring=tuple(sorted(retiring_names(session, pool.id))),
        capacities=tuple(sorted((n.node_id, capacity(pool.max_cpu_loras, n.limits)) for n in nodes)),
        rates=tuple(sorted(rates.items())),
        previous=json.dumps(pool.placement, sort_keys=True),
        loaded=tuple(sorted(loaded.items()))))


@dataclass(frozen=True)
class Inputs:
    """Everything a placement is computed from, hashable."""
    names: tuple[str, ...]
    retiring: tuple[str, ...]
    capacities: tuple[tuple[str, int], ...]  # live node id -> adapters it keeps resident
    rates: tuple[tuple[str, float], ...]  # served name -> requests per second
    previous: str  # the stored placement it replaces, as JSON
    loaded: tuple[tuple[str, tuple[str, ...]], ...]  # live node id -> what it holds


# A pure function of its inputs, so remembered: placing costs adapters × nodes hashes, and most
# node reports (heartbeats) change none of them.
@lru_cache(maxsize=256)
def _placed(inputs: Inputs) -> dict:
    capacities = dict(inputs.capacities)
    previous = from_stored(json.loads(inputs.previous))
    loaded = {node: frozenset(held) for node, held in inputs.loaded}
    placed = place(inputs.names, capacities, dict(inputs.rates), previous, inputs.retiring)
    return to_stored(with_draining(placed, previous, capacities, loaded))
