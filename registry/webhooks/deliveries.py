"""The delivery side, for the housekeeping worker: what to send, and what happened."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from registry.rows import existing
from registry.tables import Webhook, WebhookDelivery
from registry.webhooks import repository
from registry.webhooks.service import DELIVERED, FAILED, PENDING


@dataclass(frozen=True)
class Send:
    delivery_id: int
    url: str
    secret: str
    event: str
    body: bytes


def due(session: Session, delivery_id: int) -> Send | None:
    """What to send, or None when it was delivered, gave up, or its webhook is disabled."""
    row = session.get(WebhookDelivery, delivery_id)
    if row is None or row.state != PENDING:
        return None
    hook = existing(session, Webhook, row.webhook_id)
    if hook.disabled_at is not None:
        row.state, row.last_error = FAILED, "the webhook was disabled"
        return None
    body = json.dumps({"id": row.id, **row.payload}, sort_keys=True, separators=(",", ":")).encode()
    return Send(row.id, hook.url, hook.secret, row.event, body)


def record_attempt(session: Session, delivery_id: int, *, status: int | None, error: str | None,
                   max_attempts: int, backoff_s: float, final: bool = False) -> float | None:
    """Returns the delay before the next attempt, or None when there is none to make. A `final`
    failure (a refused address) is not tried again: the same check would refuse it again."""
    row = session.get(WebhookDelivery, delivery_id, with_for_update=True)
    if row is None or row.state != PENDING:
        return None
    row.attempts += 1
    row.last_status, row.last_error = status, (error or "")[:1000] or None
    now = datetime.now(UTC)
    if status is not None and 200 <= status < 300:
        row.state, row.delivered_at, row.next_attempt_at = DELIVERED, now, None
        return None
    if final or row.attempts >= max_attempts:
        row.state, row.next_attempt_at = FAILED, None
        return None
    delay = backoff_s * 2 ** (row.attempts - 1)
    row.next_attempt_at = now + timedelta(seconds=delay)
    return delay


def overdue_ids(session: Session, *, slack_s: float) -> list[int]:
    """Pending deliveries whose task seems lost (the broker was away, or a worker died): never
    tried and older than slack_s, or due for a retry more than slack_s ago."""
    cutoff = datetime.now(UTC) - timedelta(seconds=slack_s)
    return repository.overdue_delivery_ids(session, PENDING, cutoff=cutoff)
