"""Queries behind each pool's active set: its generation, aliases and retirements, what its
nodes report, the served names of its versions, and the attestations it ships with them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, select, text, update
from sqlalchemy.orm import Session

from registry.settings import get_settings
from registry.tables import (
    Adapter, AdapterVersion, Attestation, NodeStatus, Pool, PoolAlias, PoolRetirement,
    Requalification, Tenant,
)


def lock_pool(session: Session, pool_id: int) -> None:
    """FOR UPDATE, the lock a generation bump takes: nothing else changes the set meanwhile."""
    session.execute(select(Pool.id).where(Pool.id == pool_id).with_for_update())


def bump_generation(session: Session, pool_id: int) -> tuple[int, str]:
    """(new generation, pool name). Locks the pool row until commit."""
    row = session.execute(
        update(Pool).where(Pool.id == pool_id).values(generation=Pool.generation + 1)
        .returning(Pool.generation, Pool.name)).one()
    return row.generation, row.name


def notify(session: Session, channel: str, payload: str) -> None:
    """Postgres NOTIFY, sent by the database when (and only if) the transaction commits."""
    session.execute(text("SELECT pg_notify(:channel, :payload)"),
                    {"channel": channel, "payload": payload})


async def listen(connection, channel: str) -> None:
    """Subscribe a raw (autocommit) psycopg connection to `channel`'s notifications."""
    await connection.execute(f"LISTEN {channel}")


def all_generations(session: Session) -> list[tuple[str, int]]:
    return [(name, generation) for name, generation in session.execute(
        select(Pool.name, Pool.generation))]


def alias_row(session: Session, pool_id: int, adapter_id: int, alias: str) -> PoolAlias | None:
    return session.scalar(select(PoolAlias).where(
        PoolAlias.pool_id == pool_id, PoolAlias.adapter_id == adapter_id, PoolAlias.alias == alias))


def aliases_of_pool(session: Session, pool_id: int) -> list[PoolAlias]:
    return list(session.scalars(select(PoolAlias).where(PoolAlias.pool_id == pool_id)))


def project_aliases(session: Session, pool_id: int, signed: list) -> int:
    """Make the pool's alias rows say what its signed set says (`signed`: its SignedAlias items);
    returns how many rows had to change beyond what the change itself wrote."""
    rows = {(row.adapter_id, row.alias): row for row in aliases_of_pool(session, pool_id)}
    repaired = 0
    for alias in signed:
        row = rows.pop((alias.adapter_id, alias.alias), None)
        if row is None:
            row = PoolAlias(pool_id=pool_id, adapter_id=alias.adapter_id, alias=alias.alias)
            session.add(row)
        wanted = (alias.version_id, alias.weight, alias.promotion_id)
        if (row.version_id, row.weight, row.promotion_id) != wanted:
            row.version_id, row.weight, row.promotion_id = wanted
            repaired += 1
    for row in rows.values():
        session.delete(row)
        repaired += 1
    session.flush()
    return repaired


def aliased_version_ids(session: Session, pool_id: int) -> set[int]:
    return set(session.scalars(select(PoolAlias.version_id).where(PoolAlias.pool_id == pool_id)))


def retiring_version_ids(session: Session, pool_id: int) -> set[int]:
    return set(session.scalars(select(PoolRetirement.version_id)
                               .where(PoolRetirement.pool_id == pool_id)))


def retirements(session: Session, pool_id: int) -> list[PoolRetirement]:
    """Read afresh: another transaction may have dropped some since this session last looked."""
    return list(session.scalars(select(PoolRetirement).where(PoolRetirement.pool_id == pool_id)
                                .execution_options(populate_existing=True)))


def unretire(session: Session, pool_id: int, version_id: int) -> None:
    session.execute(delete(PoolRetirement).where(PoolRetirement.pool_id == pool_id,
                                                 PoolRetirement.version_id == version_id))


def delete_retirements(session: Session, retirement_ids: list[int]) -> None:
    session.execute(delete(PoolRetirement).where(PoolRetirement.id.in_(retirement_ids)))


def served_names(session: Session, version_ids: set[int]) -> dict[str, str]:
    """served name (tenant/adapter@number) -> digest of each version."""
    return dict(names_and_digests(session, version_ids).values())


def versions_with_owners(session: Session, version_ids: list[int]) -> dict[int, tuple[AdapterVersion, str, str]]:
    """version id -> (the version, its adapter's name, its tenant's name), in one query."""
    rows = session.execute(
        select(AdapterVersion, Adapter.name, Tenant.name)
        .join(Adapter, Adapter.id == AdapterVersion.adapter_id).join(Tenant, Tenant.id == Adapter.tenant_id)
        .where(AdapterVersion.id.in_(version_ids))).tuples().all()
    return {version.id: (version, adapter, tenant) for version, adapter, tenant in rows}


def sizes_of_versions(session: Session, version_ids: set[int]) -> dict[int, int]:
    """version id -> its files' bytes."""
    return dict(session.execute(select(AdapterVersion.id, AdapterVersion.size_bytes)
                                .where(AdapterVersion.id.in_(list(version_ids)))).tuples().all())


def names_and_digests(session: Session, version_ids: set[int]) -> dict[int, tuple[str, str]]:
    """version id -> (served name, digest)."""
    rows = session.execute(
        select(AdapterVersion.id, Tenant.name, Adapter.name, AdapterVersion.number, AdapterVersion.digest)
        .join(Adapter, Adapter.id == AdapterVersion.adapter_id).join(Tenant, Tenant.id == Adapter.tenant_id)
        .where(AdapterVersion.id.in_(list(version_ids)))).all()
    return {vid: (f"{tenant}/{name}@{number}", digest) for vid, tenant, name, number, digest in rows}


def unsigned_pools(session: Session) -> list[Pool]:
    """Pools without a signed active set (SQL NULL, or JSON null written by hand)."""
    return [pool for pool in session.scalars(select(Pool).order_by(Pool.id)) if pool.signed_active_set is None]


def pool_for_change(session: Session, pool_id: int) -> Pool:
    """The pool row as the generation bump left it (the session may hold an older copy); the bump
    locked it, so it is there."""
    return session.execute(select(Pool).where(Pool.id == pool_id)
                           .execution_options(populate_existing=True)).scalar_one()


def live_nodes(session: Session, pool_id: int) -> list[NodeStatus]:
    """The pool's nodes that reported within `node_stale_after_s`."""
    since = datetime.now(UTC) - timedelta(seconds=get_settings().node_stale_after_s)
    return list(session.scalars(select(NodeStatus).where(NodeStatus.pool_id == pool_id,
                                                         NodeStatus.reported_at >= since)))


def node_statuses(session: Session, pool_id: int) -> list[NodeStatus]:
    """Every node that ever reported to the pool, live or not, by node id."""
    return list(session.scalars(select(NodeStatus).where(NodeStatus.pool_id == pool_id)
                                .order_by(NodeStatus.node_id)))


def node_status(session: Session, pool_id: int, node_id: str) -> NodeStatus | None:
    return session.scalar(select(NodeStatus).where(NodeStatus.pool_id == pool_id,
                                                   NodeStatus.node_id == node_id))


def current_attestations(session: Session, pool_id: int,
                         version_ids: list[int]) -> dict[int, dict[str, Any]]:
    """version id -> the envelope of its newest attestation in the pool."""
    newest = (select(func.max(Attestation.id)).where(Attestation.pool_id == pool_id,
                                                     Attestation.version_id.in_(version_ids))
              .group_by(Attestation.version_id))
    rows = session.execute(select(Attestation.version_id, Attestation.envelope)
                           .where(Attestation.id.in_(newest))).all()
    return {version_id: envelope for version_id, envelope in rows}


def requalify_policy(session: Session, pool_id: int) -> str | None:
    """None when there is no such pool."""
    return session.scalar(select(Pool.requalify_policy).where(Pool.id == pool_id))


def marked_version_ids(session: Session, pool_id: int) -> set[int]:
    return set(session.scalars(select(Requalification.version_id).where(
        Requalification.pool_id == pool_id, Requalification.cleared_at.is_(None))))
