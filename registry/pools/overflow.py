"""Switching a pool between `refuse` and `on_demand` overflow, or resizing its cold tier: only
to a setting the active set already fits, since the promotion gates (registry/promotions/
gates.py) hold every later change to it."""

from __future__ import annotations

from sqlalchemy.orm import Session

from registry import audit
from registry.active_set import signed_set
from registry.active_set.repository import live_nodes, sizes_of_versions
from registry.active_set.writing.change import new_generation
from registry.errors import Conflict, Unprocessable
from registry.placement.rules import capacity as node_capacity
from registry.pools.schemas import PoolUpdate, check_overflow
from registry.promotions.gates import byte_size, pool_capacity
from registry.tables import Pool


def change(session: Session, row: Pool, spec: PoolUpdate, *, actor: str) -> None:
    overflow = spec.overflow or row.overflow
    cold_tier_bytes = spec.cold_tier_bytes
    if cold_tier_bytes is None and overflow == "on_demand" and spec.overflow != "refuse":
        cold_tier_bytes = row.cold_tier_bytes
    try:
        check_overflow(overflow, cold_tier_bytes)
    except ValueError as error:
        raise Unprocessable(str(error), code="invalid_overflow",
                         hint="Give --cold-tier-bytes with --overflow on_demand, and neither with refuse.") from None
    if (overflow, cold_tier_bytes) == (row.overflow, row.cold_tier_bytes):
        return
    _require_fit(session, row, overflow, cold_tier_bytes)
    audit.record(session, actor=actor, action="pool.update", subject=f"pool/{row.name}",
                 before={"overflow": row.overflow, "cold_tier_bytes": row.cold_tier_bytes},
                 after={"overflow": overflow, "cold_tier_bytes": cold_tier_bytes})
    row.overflow, row.cold_tier_bytes = overflow, cold_tier_bytes
    session.flush()
    new_generation(session, row.id)  # each node's part of the set now lists the cold versions, or not


def _require_fit(session: Session, row: Pool, overflow: str, cold_tier_bytes: int | None) -> None:
    served = {alias.version_id for alias in signed_set.load(row).aliases.values()}
    if overflow == "refuse":
        slots = [node_capacity(row.max_cpu_loras, n.limits) for n in live_nodes(session, row.id)]
        capacity, source = pool_capacity(row.max_cpu_loras, slots)
        if len(served) > capacity:
            raise Conflict(f"pool {row.name!r} serves {len(served)} adapters, more than the {capacity} its "
                           f"nodes keep resident ({source}), so it cannot refuse overflow",
                           code="active_set_too_large",
                           hint="Roll back or retire versions in this pool first, or add nodes.")
        return
    needed = sum(sizes_of_versions(session, served).values())
    if needed > (cold_tier_bytes or 0):
        raise Conflict(f"pool {row.name!r} serves {len(served)} adapters of {byte_size(needed)}, more "
                       f"than a cold tier of {byte_size(cold_tier_bytes or 0)} holds",
                       code="active_set_too_large",
                       hint=f"Give a cold tier of at least {needed} bytes, or roll back versions first.")
