"""The housekeeping worker: webhook deliveries. It needs no engine, only the registry's
settings, and runs with `loraplane housekeeper`."""

from __future__ import annotations

import logging
import threading
import time

from celery import Celery
from celery.signals import worker_ready

from registry.db import transaction
from registry.settings import get_settings
from registry.task_queue import DELIVER_WEBHOOK, celery_config, enqueue_webhook_deliveries
from registry.webhooks import deliveries, sending

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
    # Resolved once and connected to the checked address: no DNS rebinding between the two.
    attempt = sending.deliver(send, timeout_s=settings.webhook_timeout_s,
                              allowed=settings.webhook_allowed_networks)
    with transaction() as session:
        delay = deliveries.record_attempt(session, delivery_id, status=attempt.status,
                                          error=attempt.error, final=attempt.final,
                                          max_attempts=settings.webhook_max_attempts,
                                          backoff_s=settings.webhook_backoff_s)
    if delay is not None:
        raise self.retry(countdown=delay)
    return f"HTTP {attempt.status}" if attempt.status else (attempt.error or "")


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
