"""Keep each pool's placement current, and read it.

The placement is part of what nodes are told, so it changes only together with the pool's
generation: with every change to the active set (before that change commits), and when a node
joins, leaves, or finishes loading what another node drains, or when traffic moves a replica.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from registry.active_set import changes
from registry.active_set.snapshot import desired_digests, pool_by_name, retiring_names
from registry.auth.principal import Principal, Role
from registry.placement.rules import EVERYWHERE, Placement, place, replica_counts, with_draining
from registry.settings import get_settings
from registry.tables import NodeStatus, Pool, RouterTraffic


def refresh(session: Session, pool_id: int, *, changed: bool) -> bool:
    """Recompute the pool's placement and store it if it differs. `changed`: the caller already
    began a change (bumped the generation); otherwise a difference begins one. True if stored."""
    pool = session.get(Pool, pool_id)
    if _computed(session, pool) == _as_stored(pool):
        return False
    # Again under the pool's lock, so that two reports racing neither store each other's view
    # nor bump the generation twice for one change.
    session.execute(select(Pool.id).where(Pool.id == pool_id).with_for_update())
    session.refresh(pool)
    placement = _computed(session, pool)
    if placement == _as_stored(pool):
        return False
    if not changed:
        changes.begin_change(session, pool_id)
    pool.placement = placement
    session.flush()
    return True


# pool id -> (inputs, stored form) of the last placement this process computed. Placing costs
# adapters × nodes hashes, and most reports (heartbeats) change none of its inputs.
_last: dict[int, tuple[tuple, dict]] = {}


def _computed(session: Session, pool: Pool) -> dict:
    """The stored form of the placement the pool should have now."""
    nodes = changes.live_nodes(session, pool.id)
    capacities = {n.node_id: capacity(pool, n.limits) for n in nodes}
    loaded = {n.node_id: frozenset(a["served_name"] for a in n.loaded) for n in nodes}
    names = sorted(desired_digests(session, pool.id))
    retiring = retiring_names(session, pool.id)
    rates = traffic(session, pool.id)
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
    previous = stored(pool)
    new = _structure(with_draining(place(names, capacities, rates, previous, retiring), previous,
                                   capacities, loaded))
    _last[pool.id] = (inputs, new)
    return new


def capacity(pool: Pool, limits: dict | None) -> int:
    """Adapters a node keeps resident: its vLLM's max_cpu_loras, at most the pool's."""
    return min(pool.max_cpu_loras, (limits or {}).get("max_cpu_loras") or pool.max_cpu_loras)


def stored(pool: Pool) -> Placement | None:
    data = pool.placement
    if not data:
        return None
    targets = {node: frozenset(names) for node, names in data["targets"].items()}
    names = {name for held in targets.values() for name in held} | set(data["unplaced"])
    replicas = {name: sum(name in held for held in targets.values()) for name in names}
    return Placement(data["mode"], targets, replicas, {}, tuple(data["unplaced"]),
                     {node: frozenset(names) for node, names in data["draining"].items()})


def last_loaded(session: Session, pool: Pool, node_id: str) -> frozenset[str]:
    """What the node reported holding last; nothing for a node never seen."""
    row = session.scalar(select(NodeStatus).where(NodeStatus.pool_id == pool.id, NodeStatus.node_id == node_id))
    return frozenset(a["served_name"] for a in row.loaded) if row is not None else frozenset()


def record_traffic(session: Session, principal: Principal, pool_name: str, router_id: str,
                   rates: dict[str, float]) -> None:
    principal.require_instance(pool_name, router_id, Role.ROUTER)
    pool = pool_by_name(session, pool_name)
    query = select(RouterTraffic).where(RouterTraffic.pool_id == pool.id, RouterTraffic.router_id == router_id)
    fields = {"rates": rates, "reported_at": datetime.now(UTC)}
    row = session.scalar(query.with_for_update())
    if row is None:
        try:
            with session.begin_nested():  # a first report racing another from the same router
                session.add(RouterTraffic(pool_id=pool.id, router_id=router_id, **fields))
        except IntegrityError:
            row = session.scalar(query.with_for_update())
    if row is not None:
        row.rates, row.reported_at = fields["rates"], fields["reported_at"]
    session.flush()
    refresh(session, pool.id, changed=False)


def traffic(session: Session, pool_id: int) -> dict[str, float]:
    """Requests per second by served name, added up over the routers that reported lately."""
    since = datetime.now(UTC) - timedelta(seconds=get_settings().traffic_stale_after_s)
    rows = session.scalars(select(RouterTraffic).where(RouterTraffic.pool_id == pool_id,
                                                       RouterTraffic.reported_at >= since))
    total: dict[str, float] = {}
    for row in rows:
        for name, rate in row.rates.items():
            total[name] = total.get(name, 0.0) + rate
    return total


EVERYWHERE_STORED = {"mode": EVERYWHERE, "targets": {}, "draining": {}, "unplaced": []}


def _as_stored(pool: Pool) -> dict:
    """A pool never placed is placed everywhere."""
    return pool.placement or EVERYWHERE_STORED


def _structure(placement: Placement) -> dict:
    """What is stored: the assignments, not the shares (which move with every report). While
    every node holds everything, nothing more: nodes coming and going change nothing."""
    if placement.mode == EVERYWHERE:
        return EVERYWHERE_STORED
    return {"mode": placement.mode,
            "targets": {node: sorted(names) for node, names in sorted(placement.targets.items())},
            "draining": {node: sorted(names) for node, names in sorted(placement.draining.items()) if names},
            "unplaced": list(placement.unplaced)}
