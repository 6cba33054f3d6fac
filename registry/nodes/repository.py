"""Queries behind nodes' reports and addresses. Reading them for a pool's active set:
active_set/repository.py."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from registry.tables import NodeAddress, NodeStatus, Pool


def status_for_update(session: Session, pool_id: int, node_id: str) -> NodeStatus | None:
    return session.scalar(select(NodeStatus).where(
        NodeStatus.pool_id == pool_id, NodeStatus.node_id == node_id).with_for_update())


def address_for_update(session: Session, pool_id: int, node_id: str) -> NodeAddress | None:
    return session.scalar(select(NodeAddress).where(
        NodeAddress.pool_id == pool_id, NodeAddress.node_id == node_id).with_for_update())


def addresses_of_pool(session: Session, pool_id: int) -> list[NodeAddress]:
    return list(session.scalars(select(NodeAddress).where(NodeAddress.pool_id == pool_id)))


def address_of(session: Session, pool_id: int, node_id: str) -> NodeAddress | None:
    return session.scalar(select(NodeAddress).where(
        NodeAddress.pool_id == pool_id, NodeAddress.node_id == node_id))


def all_addresses(session: Session) -> list[tuple[Pool, NodeAddress]]:
    return [(pool, row) for row, pool in session.execute(
        select(NodeAddress, Pool).join(Pool, Pool.id == NodeAddress.pool_id).order_by(NodeAddress.id))]
