from __future__ import annotations

from sqlalchemy import func, or_, select
from sqlalchemy.dialects.postgresql import insert as postgres_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from registry.pagination import fetch_page
from registry.tables import Adapter, AdapterVersion, BaseModel, Pool, PoolAlias, PoolRetirement, Tenant


def tenant_by_name(session: Session, name: str) -> Tenant | None:
    return session.scalar(select(Tenant).where(Tenant.name == name))


def adapter_by_name(session: Session, tenant_id: int, name: str) -> Adapter | None:
    return session.scalar(select(Adapter).where(Adapter.tenant_id == tenant_id, Adapter.name == name))


def lock_or_create_adapter(session: Session, tenant_id: int, name: str, base_model_id: int) -> Adapter:
    """Create the adapter if needed, then lock its row so version numbers are handed out in order."""
    insert = postgres_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    session.execute(
        insert(Adapter)
        .values(tenant_id=tenant_id, name=name, base_model_id=base_model_id)
        .on_conflict_do_nothing(index_elements=["tenant_id", "name"])
    )
    query = select(Adapter).where(Adapter.tenant_id == tenant_id, Adapter.name == name)
    return session.scalars(query.with_for_update()).one()


def version_by_digest(session: Session, adapter_id: int, digest: str) -> AdapterVersion | None:
    query = select(AdapterVersion).where(
        AdapterVersion.adapter_id == adapter_id, AdapterVersion.digest == digest
    )
    return session.scalar(query)


def version_by_number(session: Session, adapter_id: int, number: int) -> AdapterVersion | None:
    query = select(AdapterVersion).where(
        AdapterVersion.adapter_id == adapter_id, AdapterVersion.number == number
    )
    return session.scalar(query)


def latest_version_number(session: Session, adapter_id: int) -> int | None:
    query = select(func.max(AdapterVersion.number)).where(AdapterVersion.adapter_id == adapter_id)
    return session.scalar(query)


def page_of_adapters(session: Session, *, tenant: str | None, base_model: str | None,
                     limit: int, cursor: str | None, name_contains: str | None = None,
                     state: str | None = None, pool: str | None = None) -> tuple[list[Adapter], str | None]:
    """`name_contains`: a substring of the name, matched literally (% and _ are not wildcards);
    `pool`: adapters a version of which the pool serves or is still retiring."""
    query = select(Adapter)
    if tenant is not None:
        query = query.join(Tenant, Tenant.id == Adapter.tenant_id).where(Tenant.name == tenant)
    if base_model is not None:
        query = query.join(BaseModel, BaseModel.id == Adapter.base_model_id).where(
            BaseModel.name == base_model)
    if name_contains:
        escaped = name_contains.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        query = query.where(Adapter.name.like(f"%{escaped}%", escape="\\"))
    if state is not None:
        query = query.where(Adapter.state == state)
    if pool is not None:
        pool_id = select(Pool.id).where(Pool.name == pool).scalar_subquery()
        aliased = select(PoolAlias.adapter_id).where(PoolAlias.pool_id == pool_id)
        retiring = (select(AdapterVersion.adapter_id)
                    .join(PoolRetirement, PoolRetirement.version_id == AdapterVersion.id)
                    .where(PoolRetirement.pool_id == pool_id))
        query = query.where(or_(Adapter.id.in_(aliased), Adapter.id.in_(retiring)))
    return fetch_page(session, query, Adapter.id, limit=limit, cursor=cursor)


def page_of_versions(session: Session, adapter_id: int, *, state: str | None,
                     limit: int, cursor: str | None) -> tuple[list[AdapterVersion], str | None]:
    query = select(AdapterVersion).where(AdapterVersion.adapter_id == adapter_id)
    if state is not None:
        query = query.where(AdapterVersion.state == state)
    return fetch_page(session, query, AdapterVersion.id, limit=limit, cursor=cursor)


def lock_adapter(session: Session, adapter_id: int) -> Adapter:
    """The adapter's row, locked until the transaction ends and read afresh."""
    query = select(Adapter).where(Adapter.id == adapter_id).with_for_update()
    return session.scalars(query.execution_options(populate_existing=True)).one()


def lock_versions(session: Session, version_ids: list[int], *, shared: bool = False) -> list[AdapterVersion]:
    """The versions' rows, locked in id order (FOR UPDATE, or FOR SHARE with `shared`) and read
    afresh. Retiring and deleting take the exclusive lock; promoting and evaluating the shared
    one, so that each sees the other's committed state (SQLite's writers run one at a time)."""
    query = (select(AdapterVersion).where(AdapterVersion.id.in_(version_ids))
             .order_by(AdapterVersion.id).with_for_update(read=shared))
    return list(session.scalars(query.execution_options(populate_existing=True)))


def version_ids_of(session: Session, adapter_id: int) -> list[int]:
    return list(session.scalars(select(AdapterVersion.id).where(AdapterVersion.adapter_id == adapter_id)
                                .order_by(AdapterVersion.id)))
