"""Take nodes' reports and show each pool's rollout."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from registry.active_set.writing import changes
from registry.active_set.writing.change import follow_nodes
from registry.active_set.repository import node_statuses
from registry.active_set.reading.snapshot import desired_digests
from registry.pool_lookup import pool_by_name
from registry.active_set.reading.visibility import visible_to
from registry.auth.principal import Principal, Role
from registry.clock import aware
from registry.errors import Unprocessable
from registry.names import check_name
from registry.nodes import addresses, repository
from registry.nodes.schemas import (
    DriftOut, NodeAddressOut, NodeFailure, NodeIncident, NodeOut, NodeReport, RolloutOut,
)
from registry.placement.rules import EVERYWHERE, Placement
from registry.placement.stored import from_stored
from registry.requalification import service as requalification
from registry.settings import get_settings
from registry.tables import NodeStatus


def report(session: Session, principal: Principal, pool_name: str, node_id: str,
           body: NodeReport) -> NodeOut:
    principal.require_instance(pool_name, node_id, Role.NODE)
    check_name(node_id, "node")
    pool = pool_by_name(session, pool_name)
    if body.generation > pool.generation:
        raise Unprocessable(f"generation {body.generation} is ahead of pool {pool.name!r}'s "
                            f"{pool.generation}", code="generation_ahead",
                            hint="Report the generation of the active set the node applied.")
    fields = dict(generation=body.generation, loaded=[a.model_dump() for a in body.loaded],
                  failures=[f.model_dump() for f in body.failures],
                  incidents=[i.model_dump(mode="json") for i in body.incidents],
                  engine=body.engine.model_dump() if body.engine else None,
                  limits=body.limits.model_dump(), reported_at=datetime.now(UTC))
    row = _upsert(session, pool.id, node_id, fields)
    # A new engine or base config asks the pool's versions to qualify again.
    requalification.observe_report(session, pool, node_id, row.engine)
    changes.drop_drained(session, pool.id)
    # A node that joined, left or finished loading may change where adapters live.
    follow_nodes(session, pool.id)
    return _node_out(row, desired_digests(session, pool.id), pool.generation, visible_to(principal),
                     internals=True, placed=from_stored(pool.placement), on_demand=pool.overflow == "on_demand",
                     address=addresses.trusted_one(session, pool, node_id))


def bind_address(session: Session, principal: Principal, pool_name: str, node_id: str,
                 url: str) -> NodeAddressOut:
    principal.require_global_admin()
    check_name(node_id, "node")
    pool = pool_by_name(session, pool_name)
    row = addresses.bind(session, pool, node_id, url, actor=principal.label)
    return NodeAddressOut(pool=pool.name, node_id=node_id, vllm_url=row.vllm_url,
                          bound_by=row.bound_by, bound_at=row.bound_at or datetime.now(UTC))


def _upsert(session: Session, pool_id: int, node_id: str, fields: dict) -> NodeStatus:
    row = repository.status_for_update(session, pool_id, node_id)
    if row is None:
        try:
            with session.begin_nested():  # a first report racing another from the same node
                row = NodeStatus(pool_id=pool_id, node_id=node_id, **fields)
                session.add(row)
            return row
        except IntegrityError:
            row = repository.status_for_update(session, pool_id, node_id)
            if row is None:  # the row this one collided with is gone again
                raise
    for key, value in fields.items():
        setattr(row, key, value)
    session.flush()
    return row


def rollout(session: Session, principal: Principal, pool_name: str) -> RolloutOut:
    principal.require_pool_viewer(pool_name)
    pool = pool_by_name(session, pool_name)
    desired = desired_digests(session, pool.id)
    visible = visible_to(principal)
    rows = node_statuses(session, pool.id)
    internals = principal.tenant is None  # global admins, the pool's own nodes and routers
    placed = from_stored(pool.placement)
    bound = addresses.trusted(session, pool)
    nodes = [_node_out(row, desired, pool.generation, visible, internals=internals, placed=placed,
                       on_demand=pool.overflow == "on_demand", address=bound.get(row.node_id, ("unbound", None)))
             for row in rows]
    return RolloutOut(pool=pool.name, generation=pool.generation, nodes_total=len(nodes),
                      nodes_converged=sum(n.converged for n in nodes),
                      nodes_stale=sum(n.stale for n in nodes), nodes=nodes)


def _node_out(row: NodeStatus, desired: dict[str, str], generation: int, visible, *,
              internals: bool, placed: Placement | None, on_demand: bool,
              address: tuple[str, str | None]) -> NodeOut:
    """Drift is against what this node should hold (under on_demand, any version of the set may
    be held besides); `serving` is every active version it holds, which a router may send to it
    even while the node drains it."""
    loaded = {a["served_name"]: a["digest"] for a in row.loaded}
    if placed is None or placed.mode == EVERYWHERE:
        mine = desired
    else:
        served_by = placed.served_by(row.node_id)
        mine = {name: digest for name, digest in desired.items() if name in served_by}
    drift = DriftOut(
        missing=sorted(n for n in mine if n not in loaded),
        extra=sorted(n for n in loaded if n not in (desired if on_demand else mine)),
        wrong_digest=sorted(n for n in mine if n in loaded and loaded[n] != mine[n]))
    converged = row.generation == generation and not (drift.missing or drift.extra or drift.wrong_digest)
    age = (datetime.now(UTC) - aware(row.reported_at)).total_seconds()
    return NodeOut(
        node_id=row.node_id, generation=row.generation, converged=converged,
        stale=age > get_settings().node_stale_after_s, seconds_since_report=round(age, 3),
        drift=DriftOut(missing=[n for n in drift.missing if visible(n)],
                       extra=[n for n in drift.extra if visible(n)],
                       wrong_digest=[n for n in drift.wrong_digest if visible(n)]),
        # A node's own words: shown only about versions the pool serves, to those who see them.
        failures=[NodeFailure(**f) for f in row.failures if f["served_name"] in desired and visible(f["served_name"])],
        incidents=[NodeIncident(**i) for i in row.incidents or []
                   if i["served_name"] in desired and visible(i["served_name"])],
        serving=sorted(n for n, digest in desired.items() if loaded.get(n) == digest and visible(n)),
        vllm_url=address[1] if internals else None, address=address[0],
        limits=row.limits if internals else None,
        reported_at=row.reported_at)

