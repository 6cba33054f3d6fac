"""The housekeeping worker: webhook deliveries. It needs no engine, only the registry's
settings, and runs with `loraplane housekeeper`."""

from __future__ import annotations

import logging
import threading
import time

import httpx
from celery import Celery
from celery.signals import worker_ready

from registry.db import transaction
from registry.settings import get_settings
from registry.task_queue import DELIVER_WEBHOOK, celery_config, enqueue_webhook_deliveries
from registry.webhooks import deliveries, destinations, signing

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
    refused = destinations.resolved_reason(send.url, settings.webhook_allowed_networks)
    status, error = (None, f"refused: {refused}") if refused else _post(send, settings.webhook_timeout_s)
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
        # Only the status matters: the body is never read, so a receiver cannot feed the worker
        # a large or endless one, and nothing it says is shown back to whoever made the webhook.
        with httpx.stream("POST", send.url, content=send.body, headers=headers, timeout=timeout_s,
                          follow_redirects=False) as response:
            status = response.status_code
    except httpx.HTTPError as error:
        return None, type(error).__name__
    return status, None if 200 <= status < 300 else f"HTTP {status}"


SWEEP_EVERY_S = 60


@worker_ready.connect
def start_sweeping(**_) -> None:
    threading.Thread(target=_sweep_forever, name="webhook-sweep", daemon=True).start()


def _sweep_forever() -> None:
    """Re-send deliveries whose task was lost (the broker was away when the event committed, or a
    worker died). Receivers deduplicate by delivery id, so a rare second send is harmless."""
    while True:
        try:
            with transaction() as session:
                overdue = deliveries.overdue_ids(session, slack_s=SWEEP_EVERY_S)
            if overdue:
                log.info("re-sending %d overdue webhook deliveries", len(overdue))
                enqueue_webhook_deliveries(overdue)
        except Exception:  # the database or broker is away: try again next round
            log.exception("webhook sweep failed")
        time.sleep(SWEEP_EVERY_S)
