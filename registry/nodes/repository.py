"""Queries behind nodes' reports. Reading them for a pool's active set: active_set/repository.py."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from registry.tables import NodeStatus


def status_for_update(session: Session, pool_id: int, node_id: str) -> NodeStatus | None:
    return session.scalar(select(NodeStatus).where(
        NodeStatus.pool_id == pool_id, NodeStatus.node_id == node_id).with_for_update())
