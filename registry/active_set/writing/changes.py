"""What a change does to a pool's active set: point and drop aliases, and retire versions that
lost their last alias once traffic has moved. Each runs inside an `ActiveSetChange` (change.py):
it changes the change's signed set, and the rows that project it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from registry import audit
from registry.active_set import repository
from registry.active_set.writing.change import ActiveSetChange
from registry.active_set.signed_set import SignedAlias, SignedRetiring
from registry.clock import aware
from registry.rows import existing
from registry.settings import get_settings
from registry.tables import Adapter, AdapterVersion, Pool, PoolAlias, PoolRetirement, Tenant


def point_alias(session: Session, change: ActiveSetChange, *, adapter_id: int, alias: str,
                version_id: int, weight: int | None, promotion_id: int) -> int | None:
    """Point the alias at the version; returns the version it pointed at before, if any (as the
    signed set says: a row edited meanwhile changes nothing here)."""
    served_name, digest = repository.names_and_digests(session, {version_id})[version_id]
    previous = change.signed.point(SignedAlias(adapter_id, alias, version_id, served_name, digest,
                                               weight, promotion_id))
    row = repository.alias_row(session, change.pool_id, adapter_id, alias)
    if row is None:
        row = PoolAlias(pool_id=change.pool_id, adapter_id=adapter_id, alias=alias)
        session.add(row)
    row.version_id, row.weight, row.promotion_id = version_id, weight, promotion_id
    repository.unretire(session, change.pool_id, version_id)
    session.flush()
    if previous is not None and previous != version_id:
        retire_if_unaliased(session, change, previous)
    return previous


def drop_alias(session: Session, change: ActiveSetChange, *, adapter_id: int, alias: str) -> None:
    dropped = change.signed.drop(adapter_id, alias)
    row = repository.alias_row(session, change.pool_id, adapter_id, alias)
    if row is not None:
        session.delete(row)
        session.flush()
    if dropped is not None:
        retire_if_unaliased(session, change, dropped.version_id)


def retire_if_unaliased(session: Session, change: ActiveSetChange, version_id: int) -> None:
    """A version without aliases keeps serving requests in flight until every live node has
    moved on (see drop_drained). With no live node there is no traffic to wait for."""
    if change.signed.is_aliased(version_id) or not repository.live_nodes(session, change.pool_id):
        return
    served_name, digest = repository.names_and_digests(session, {version_id})[version_id]
    change.signed.retire(SignedRetiring(version_id, served_name, digest))
    session.add(PoolRetirement(pool_id=change.pool_id, version_id=version_id, generation=change.generation))
    session.flush()


def drop_drained(session: Session, pool_id: int) -> bool:
    """Remove retired versions once traffic has moved: every live node applied the generation
    that retired them, and the grace period for requests in flight has passed."""
    if not _drained(session, pool_id):  # the common case, without taking the pool's lock
        return False
    repository.lock_pool(session, pool_id)
    drained = _drained(session, pool_id)  # again, now that no other change can interleave
    if not drained:
        return False
    change = ActiveSetChange.begin(session, pool_id)
    for retirement in drained:
        change.signed.retiring.pop(retirement.version_id, None)
        _record_retirement(session, retirement, change.generation)
    repository.delete_retirements(session, [r.id for r in drained])
    change.finish()
    return True


def _record_retirement(session: Session, retirement: PoolRetirement, generation: int) -> None:
    """The version leaves the active set in this transaction: say so in the audit log, like
    every other change to what a pool serves."""
    pool = existing(session, Pool, retirement.pool_id).name
    version = existing(session, AdapterVersion, retirement.version_id)
    adapter = existing(session, Adapter, version.adapter_id)
    served_name = f"{existing(session, Tenant, adapter.tenant_id).name}/{adapter.name}@{version.number}"
    audit.record(session, actor="system (retirement once traffic moved)",
                 action="pool.retirement.complete", subject=f"pool/{pool}/{served_name}",
                 tenant_id=adapter.tenant_id,
                 before={"in_active_set": True, "retiring": True, "retired_at": retirement.retired_at,
                         "retired_in_generation": retirement.generation},
                 after={"in_active_set": False, "generation": generation})


def _drained(session: Session, pool_id: int) -> list[PoolRetirement]:
    retirements = repository.retirements(session, pool_id)
    if not retirements:
        return []
    nodes = repository.live_nodes(session, pool_id)
    applied = min((node.generation for node in nodes), default=None)
    cutoff = datetime.now(UTC) - timedelta(seconds=get_settings().retire_grace_s)
    return [r for r in retirements
            if (applied is None or applied >= r.generation) and aware(r.retired_at) <= cutoff]
