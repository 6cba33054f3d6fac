"""The housekeeping worker: webhook deliveries. It needs no engine, only the registry's
settings, and runs with `loraplane housekeeper`."""

from __future__ import annotations

import logging

import httpx
from celery import Celery
from celery.signals import worker_ready

from registry.db import transaction
from registry.settings import get_settings
from registry.task_queue import DELIVER_WEBHOOK, celery_config, enqueue_webhook_deliveries
from registry.webhooks import deliveries, signing

log = logging.getLogger(__name__)

app = Celery("loraplane-housekeeping")
app.conf.update(celery_config(get_settings()))


@app.task(bind=True, name=DELIVER_WEBHOOK, max_retries=None, acks_late=True)
def deliver_webhook(self, delivery_id: int) -> str:
    # Attempts are counted on the row, which survives redelivery, not by Celery's counter.
    settings = get_settings()
    with transaction() as session:
        send = deliveries.due(session, delivery_id)
    if send is None:
        return "nothing to send"
    status, error = _post(send, settings.webhook_timeout_s)
    with transaction() as session:
        delay = deliveries.record_attempt(session, delivery_id, status=status, error=error,
                                          max_attempts=settings.webhook_max_attempts,
                                          backoff_s=settings.webhook_backoff_s)
    if delay is not None:
        raise self.retry(countdown=delay)
    return f"HTTP {status}" if status else (error or "")


def _post(send: deliveries.Send, timeout_s: float) -> tuple[int | None, str | None]:
    headers = {"Content-Type": "application/json", "User-Agent": "loraplane-webhooks",
               "X-Loraplane-Event": send.event, "X-Loraplane-Delivery": str(send.delivery_id),
               signing.HEADER: signing.sign(send.secret, send.body)}
    try:
        response = httpx.post(send.url, content=send.body, headers=headers, timeout=timeout_s,
                              follow_redirects=False)
    except httpx.HTTPError as error:
        return None, f"{type(error).__name__}: {error}"
    error = None if response.is_success else f"HTTP {response.status_code}: {response.text[:200]}"
    return response.status_code, error


@worker_ready.connect
def send_overdue(**_) -> None:
    """Deliveries whose task was lost while the broker was away, or whose worker died."""
    with transaction() as session:
        overdue = deliveries.overdue_ids(session, slack_s=0)
    if overdue:
        log.info("re-sending %d overdue webhook deliveries", len(overdue))
        enqueue_webhook_deliveries(overdue)
