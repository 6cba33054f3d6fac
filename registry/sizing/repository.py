"""The query sizing needs: what a pool's active set holds."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Row, select, union
from sqlalchemy.orm import Session

from registry.tables import Adapter, AdapterVersion, PoolAlias, PoolRetirement, Tenant


def active_ranks_and_sizes(session: Session, pool_id: int, tenant: str | None = None) -> Sequence[Row[int, int]]:
    """(rank, size_bytes) of every version the pool's nodes hold, or only `tenant`'s. Retiring
    versions still hold a slot on the nodes that have not moved on yet."""
    active_ids = union(select(PoolAlias.version_id).where(PoolAlias.pool_id == pool_id),
                       select(PoolRetirement.version_id).where(PoolRetirement.pool_id == pool_id))
    query = select(AdapterVersion.rank, AdapterVersion.size_bytes).where(AdapterVersion.id.in_(active_ids))
    if tenant is not None:
        query = (query.join(Adapter, Adapter.id == AdapterVersion.adapter_id)
                 .join(Tenant, Tenant.id == Adapter.tenant_id).where(Tenant.name == tenant))
    return session.execute(query).all()
