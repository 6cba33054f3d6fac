"""The placement as the API and the dashboard show it."""

from __future__ import annotations

from sqlalchemy.orm import Session

from registry.active_set import repository
from registry.active_set.placement.schemas import PlacedAdapter, PlacedNode, PlacementOut
from registry.active_set.reading.snapshot import desired_digests
from registry.pool_lookup import pool_by_name
from registry.active_set.reading.visibility import visible_to
from registry.auth.principal import Principal
from registry.placement.repository import recent_traffic
from registry.placement.rules import EVERYWHERE, capacity, shares_of
from registry.placement.stored import from_stored


def placement_out(session: Session, principal: Principal, pool_name: str) -> PlacementOut:
    principal.require_pool_viewer(pool_name)
    pool = pool_by_name(session, pool_name)
    visible = visible_to(principal)
    names = sorted(desired_digests(session, pool.id))
    # A tenant sees its own versions' shares of its own traffic, not the pool's whole volume.
    shares = shares_of([n for n in names if visible(n)], recent_traffic(session, pool.id))
    placed = from_stored(pool.placement)
    # The placement that spreads versions over nodes; None when every node holds everything.
    spread = None if placed is None or placed.mode == EVERYWHERE else placed
    live = {n.node_id for n in repository.live_nodes(session, pool.id)}
    reported = repository.node_statuses(session, pool.id)
    # Live nodes, and any the placement still counts on (until the next change notices it left).
    shown = live | (set() if spread is None else set(spread.targets))
    capacities = {n.node_id: capacity(pool.max_cpu_loras, n.limits) for n in reported if n.node_id in shown}

    def nodes_of(name: str) -> list[str]:
        return sorted(live) if spread is None else spread.nodes_of(name)

    adapters = [PlacedAdapter(served_name=name, traffic_share=round(shares[name], 6),
                              replicas=len(nodes_of(name)), nodes=nodes_of(name),
                              draining_on=[] if spread is None else
                              sorted(n for n, held in spread.draining.items() if name in held))
                for name in names if visible(name)]
    internals = principal.tenant is None  # as the rollout: nodes' limits only for global readers
    nodes = [PlacedNode(node_id=node, capacity=capacity if internals else None, live=node in live,
                        targets=[n for n in (names if spread is None else sorted(spread.targets.get(node, ())))
                                 if visible(n)],
                        draining=[] if spread is None else
                        sorted(n for n in spread.draining.get(node, ()) if visible(n)))
             for node, capacity in sorted(capacities.items())]
    return PlacementOut(pool=pool.name, generation=pool.generation,
                        mode=EVERYWHERE if spread is None else spread.mode, adapters=adapters, nodes=nodes,
                        unplaced=[] if spread is None else [n for n in spread.unplaced if visible(n)])
