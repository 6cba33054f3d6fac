"""Place a pool's active set on its nodes (placement/rules.py) and store the result on the pool
row, where the active-set answer reads it. Called when a change to the set finishes
(change.py), under the pool's lock that change holds."""

from __future__ import annotations

import json

from sqlalchemy.orm import Session

from registry.active_set import repository
from registry.active_set.reading.snapshot import desired_digests, retiring_names
from registry.placement import repository as traffic_reports
from registry.placement.rules import capacity, place, replica_counts, with_draining
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


# pool id -> (inputs, stored form) of the last placement this process computed. Placing costs
# adapters × nodes hashes, and most reports (heartbeats) change none of its inputs.
_last: dict[int, tuple[tuple, dict]] = {}


def computed(session: Session, pool: Pool) -> dict:
    """The stored form of the placement the pool should have now."""
    nodes = repository.live_nodes(session, pool.id)
    capacities = {n.node_id: capacity(pool.max_cpu_loras, n.limits) for n in nodes}
    loaded = {n.node_id: frozenset(a["served_name"] for a in n.loaded) for n in nodes}
    names = sorted(desired_digests(session, pool.id))
    retiring = retiring_names(session, pool.id)
    rates = traffic_reports.recent_traffic(session, pool.id)
    inputs = (tuple(names), tuple(sorted(retiring)), tuple(sorted(capacities.items())),
              tuple(sorted(replica_counts(names, capacities, rates).items())),
              # Over capacity, traffic also decides which versions wait.
              tuple(sorted(names, key=lambda name: (-rates.get(name, 0.0), name)))
              if len(names) > sum(capacities.values()) else (),
              json.dumps(pool.placement, sort_keys=True),
              tuple(sorted((node, tuple(sorted(held))) for node, held in loaded.items())))
    last = _last.get(pool.id)
    if last is not None and last[0] == inputs:
        return last[1]
    previous = from_stored(pool.placement)
    new = to_stored(with_draining(place(names, capacities, rates, previous, retiring), previous,
                                  capacities, loaded))
    _last[pool.id] = (inputs, new)
    return new
