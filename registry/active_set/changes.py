"""Change a pool's active set. Every change starts with `begin_change`, which bumps the pool's
generation and so takes the pool row's lock: changes to one pool run one at a time, a reader
that locks the row for share sees a generation and entries that belong together, and the new
generation is announced only once the transaction commits."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, select, text, update
from sqlalchemy.orm import Session

from registry import audit
from registry.clock import aware
from registry.db import after_commit, before_commit
from registry.tables import (
    Adapter, AdapterVersion, NodeStatus, Pool, PoolAlias, PoolRetirement, Tenant,
)

CHANNEL = "loraplane_events"


def begin_change(session: Session, pool_id: int) -> int:
    """Bump the generation (locking the pool row until commit) and return the new one."""
    generation = session.execute(
        update(Pool).where(Pool.id == pool_id).values(generation=Pool.generation + 1)
        .returning(Pool.generation, Pool.name)).one()
    announce(session, {"kind": "generation", "pool": generation.name,
                       "generation": generation.generation})
    from registry.placement import service as placement  # it reads the active set through us

    # Whatever this change does to the set, the placement follows it in the same commit.
    before_commit(session, f"placement:{pool_id}", lambda: placement.refresh(session, pool_id, changed=True))
    return generation.generation


def announce(session: Session, message: dict) -> None:
    """Tell every registry process after commit: Postgres NOTIFY is transactional, and this
    process learns at once from its own after-commit hook."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_notify(:channel, :payload)"),
                        {"channel": CHANNEL, "payload": json.dumps(message)})
    from registry.active_set.watch import WATCH  # the process-wide watcher, when one runs

    after_commit(session, lambda: WATCH.publish_local(message))


def point_alias(session: Session, *, pool_id: int, adapter_id: int, alias: str, version_id: int,
                weight: int | None, promotion_id: int, generation: int) -> int | None:
    """Point the alias at the version; returns the version it pointed at before, if any."""
    row = session.scalar(select(PoolAlias).where(
        PoolAlias.pool_id == pool_id, PoolAlias.adapter_id == adapter_id, PoolAlias.alias == alias))
    previous = row.version_id if row else None
    if row is None:
        row = PoolAlias(pool_id=pool_id, adapter_id=adapter_id, alias=alias)
        session.add(row)
    row.version_id, row.weight, row.promotion_id = version_id, weight, promotion_id
    session.execute(delete(PoolRetirement).where(PoolRetirement.pool_id == pool_id,
                                                 PoolRetirement.version_id == version_id))
    session.flush()
    if previous is not None and previous != version_id:
        retire_if_unaliased(session, pool_id, previous, generation)
    return previous


def drop_alias(session: Session, *, pool_id: int, adapter_id: int, alias: str,
               generation: int) -> None:
    row = session.scalar(select(PoolAlias).where(
        PoolAlias.pool_id == pool_id, PoolAlias.adapter_id == adapter_id, PoolAlias.alias == alias))
    if row is not None:
        session.delete(row)
        session.flush()
        retire_if_unaliased(session, pool_id, row.version_id, generation)


def retire_if_unaliased(session: Session, pool_id: int, version_id: int, generation: int) -> None:
    """A version without aliases keeps serving requests in flight until every live node has
    moved on (see drop_drained). With no live node there is no traffic to wait for."""
    still_aliased = session.scalar(select(PoolAlias.id).where(
        PoolAlias.pool_id == pool_id, PoolAlias.version_id == version_id).limit(1))
    if still_aliased is None and live_nodes(session, pool_id):
        session.add(PoolRetirement(pool_id=pool_id, version_id=version_id, generation=generation))
        session.flush()


def live_nodes(session: Session, pool_id: int) -> list[NodeStatus]:
    from registry.settings import get_settings

    since = datetime.now(UTC) - timedelta(seconds=get_settings().node_stale_after_s)
    return list(session.scalars(select(NodeStatus).where(NodeStatus.pool_id == pool_id,
                                                         NodeStatus.reported_at >= since)))


def drop_drained(session: Session, pool_id: int) -> bool:
    """Remove retired versions once traffic has moved: every live node applied the generation
    that retired them, and the grace period for requests in flight has passed."""
    if not _drained(session, pool_id):  # the common case, without taking the pool's lock
        return False
    session.execute(select(Pool.id).where(Pool.id == pool_id).with_for_update())
    drained = _drained(session, pool_id)  # again, now that no other change can interleave
    if not drained:
        return False
    generation = begin_change(session, pool_id)
    for retirement in drained:
        _record_retirement(session, retirement, generation)
    session.execute(delete(PoolRetirement).where(PoolRetirement.id.in_([r.id for r in drained])))
    return True


def _record_retirement(session: Session, retirement: PoolRetirement, generation: int) -> None:
    """The version leaves the active set in this transaction: say so in the audit log, like
    every other change to what a pool serves."""
    pool = session.get(Pool, retirement.pool_id).name
    version = session.get(AdapterVersion, retirement.version_id)
    adapter = session.get(Adapter, version.adapter_id)
    served_name = f"{session.get(Tenant, adapter.tenant_id).name}/{adapter.name}@{version.number}"
    audit.record(session, actor="system (retirement once traffic moved)",
                 action="pool.retirement.complete", subject=f"pool/{pool}/{served_name}",
                 tenant_id=adapter.tenant_id,
                 before={"in_active_set": True, "retiring": True, "retired_at": retirement.retired_at,
                         "retired_in_generation": retirement.generation},
                 after={"in_active_set": False, "generation": generation})


def _drained(session: Session, pool_id: int) -> list[PoolRetirement]:
    from registry.settings import get_settings

    retirements = session.scalars(select(PoolRetirement).where(PoolRetirement.pool_id == pool_id)
                                  .execution_options(populate_existing=True)).all()
    if not retirements:
        return []
    nodes = live_nodes(session, pool_id)
    applied = min((node.generation for node in nodes), default=None)
    cutoff = datetime.now(UTC) - timedelta(seconds=get_settings().retire_grace_s)
    return [r for r in retirements
            if (applied is None or applied >= r.generation) and aware(r.retired_at) <= cutoff]

