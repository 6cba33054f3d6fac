"""The webhooks' queries: who listens, and the outbox of deliveries."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from registry.tables import Webhook, WebhookDelivery


def enabled_webhooks(session: Session, *, tenant_id: int | None = None) -> list[Webhook]:
    """Webhooks not disabled, by id; only one tenant's when `tenant_id` is given."""
    query = select(Webhook).where(Webhook.disabled_at.is_(None)).order_by(Webhook.id)
    if tenant_id is not None:
        query = query.where(Webhook.tenant_id == tenant_id)
    return list(session.scalars(query))


def listening_to(session: Session, tenant_id: int | None) -> list[Webhook]:
    """Webhooks not disabled that hear this tenant's events: its own and the global ones."""
    return list(session.scalars(select(Webhook).where(
        Webhook.disabled_at.is_(None),
        or_(Webhook.tenant_id.is_(None), Webhook.tenant_id == tenant_id))))


def recent_deliveries(session: Session, webhook_id: int, *, limit: int) -> list[WebhookDelivery]:
    """The webhook's newest deliveries first."""
    return list(session.scalars(
        select(WebhookDelivery).where(WebhookDelivery.webhook_id == webhook_id)
        .order_by(WebhookDelivery.id.desc()).limit(limit)))


def overdue_delivery_ids(session: Session, pending: str, *, cutoff: datetime) -> list[int]:
    """Deliveries in state `pending` never tried and created before `cutoff`, or due for a retry
    before it."""
    never_tried = WebhookDelivery.next_attempt_at.is_(None) & (WebhookDelivery.created_at < cutoff)
    return list(session.scalars(select(WebhookDelivery.id).where(
        WebhookDelivery.state == pending, or_(never_tried, WebhookDelivery.next_attempt_at < cutoff))
        .order_by(WebhookDelivery.id).limit(10_000)))
