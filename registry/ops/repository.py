"""The queries of the probes and of the fleet's metrics."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from registry.tables import BaseModel, EvalSuite, Evaluation, NodeStatus, Pool, WebhookDelivery

WAITING_STATES = ("queued", "running")


def ping(session: Session) -> None:
    session.execute(text("SELECT 1"))


def evaluations_waiting(session: Session) -> list[tuple[str, str, int, datetime | None]]:
    """(base model, state, how many, the oldest one's creation) of evaluations not finished."""
    rows = session.execute(
        select(BaseModel.name, Evaluation.state, func.count(), func.min(Evaluation.created_at))
        .join(EvalSuite, EvalSuite.id == Evaluation.suite_id)
        .join(BaseModel, BaseModel.id == EvalSuite.base_model_id)
        .where(Evaluation.state.in_(WAITING_STATES))
        .group_by(BaseModel.name, Evaluation.state))
    return [(base, state, count, oldest) for base, state, count, oldest in rows]


def webhook_deliveries_by_state(session: Session) -> list[tuple[str, int, datetime | None]]:
    """(state, how many, the oldest one's creation) of webhook deliveries."""
    rows = session.execute(select(WebhookDelivery.state, func.count(), func.min(WebhookDelivery.created_at))
                           .group_by(WebhookDelivery.state))
    return [(state, count, oldest) for state, count, oldest in rows]


def node_reports(session: Session) -> list[tuple[str, datetime]]:
    """(pool, when the node last reported) of every node that ever reported."""
    rows = session.execute(select(Pool.name, NodeStatus.reported_at)
                           .join(Pool, Pool.id == NodeStatus.pool_id))
    return [(pool, reported_at) for pool, reported_at in rows]
