"""The housekeeping worker: webhook deliveries, and canary analysis, blob collection and (when
switched on) the inference gateway's objects on a schedule. It needs no engine, only the
registry's settings, and runs with `loraplane housekeeper`.

Several may run (for availability): the scheduled loops run on the one that leads
(registry/leadership/), and each delivery is sent by one at a time; docs/operations.md,
"Several replicas"."""

from __future__ import annotations

import logging
import threading
import time

from celery import Celery
from celery.signals import worker_ready

from registry.blob_gc import service as blob_gc
from registry.canaries import repository as canary_repository
from registry.canaries import service as canaries
from registry.leadership import repository as leadership_locks
from registry.leadership.service import Leadership, sending
from registry.storage import get_store
from registry.unit_of_work import UnitOfWork, transaction
from registry.traffic_windows import service as traffic_windows
from registry.settings import get_settings
from registry.sso import sign_ins
from registry.task_queue import DELIVER_WEBHOOK, celery_config, enqueue_webhook_deliveries
from registry.webhooks import deliveries
from registry.webhooks import sending as senders
from workers import gateway_sync, metrics

log = logging.getLogger(__name__)

app = Celery("loraplane-housekeeping")
app.conf.update(celery_config(get_settings()))


@app.task(bind=True, name=DELIVER_WEBHOOK, max_retries=None, acks_late=True)
def deliver_webhook(self, delivery_id: int) -> str:
    # Attempts are counted on the row, which survives redelivery, not by Celery's counter.
    settings = get_settings()
    with sending(delivery_id) as alone:
        if not alone:  # a second copy of this task: the first sends, and retries if it must
            return "being sent by another housekeeper"
        with transaction() as session:
            send = deliveries.due(session, delivery_id)
        if send is None:
            return "nothing to send"
        # Resolved once and connected to the checked address: no DNS rebinding between the two.
        attempt = senders.deliver(send, timeout_s=settings.webhook_timeout_s,
                                  allowed=settings.webhook_allowed_networks)
        with transaction() as session:
            delay = deliveries.record_attempt(session, delivery_id, status=attempt.status,
                                              error=attempt.error, final=attempt.final,
                                              max_attempts=settings.webhook_max_attempts,
                                              backoff_s=settings.webhook_backoff_s)
    outcome = "retrying" if delay is not None else "delivered" if attempt.error is None else "failed"
    metrics.WEBHOOK_ATTEMPTS.labels(outcome).inc()
    if delay is not None:
        raise self.retry(countdown=delay)
    return f"HTTP {attempt.status}" if attempt.status else (attempt.error or "")


SWEEP_EVERY_S = 60

# The loops below run on the leading housekeeper only: a canary judged, a sweep and a collection
# made once per round across all of them.
leadership = Leadership("housekeeping", leadership_locks.HOUSEKEEPING,
                        check_s=get_settings().leadership_check_s,
                        on_change=lambda leading: metrics.LEADER.set(int(leading)))


@worker_ready.connect
def start_sweeping(**_) -> None:
    leadership.start()
    threading.Thread(target=_sweep_forever, name="webhook-sweep", daemon=True).start()
    threading.Thread(target=_judge_canaries_forever, name="canary-analysis", daemon=True).start()
    threading.Thread(target=_collect_blobs_forever, name="blob-collector", daemon=True).start()
    settings = get_settings()
    if settings.gateway_reconcile:  # docs/gateway.md
        threading.Thread(target=gateway_sync.run_forever, args=(leadership, settings),
                         name="gateway-sync", daemon=True).start()


def _judge_canaries_forever() -> None:
    """Judge every canary under analysis, each in a transaction of its own, so that one that
    fails to be judged does not hold back the others; and forget old traffic windows and the
    sign-ons that can no longer be used."""
    settings = get_settings()
    pruned_at = 0.0
    while True:
        leadership.wait_to_lead()
        try:
            with transaction() as session:
                ids = canary_repository.analysed_canary_ids(session)
            for promotion_id in ids:
                if not leadership.leading:  # lost the lead mid-round: the new leader judges the rest
                    break
                try:
                    with transaction() as session:
                        outcome = canaries.check(session, promotion_id)
                    if outcome not in (None, canaries.ANALYSING, canaries.WAITING):
                        log.info("canary %s: %s", promotion_id, outcome)
                        if (verdict := _verdict(outcome)) is not None:
                            metrics.CANARY_VERDICTS.labels(verdict).inc()
                except Exception:
                    log.exception("could not judge canary %s", promotion_id)
            if time.monotonic() - pruned_at > 3600:
                with transaction() as session:
                    traffic_windows.prune(session, keep_s=settings.traffic_window_keep_s)
                    sign_ins.forget_expired(session)
                pruned_at = time.monotonic()
            metrics.CANARY_ROUNDS.labels("ok").inc()
            metrics.LAST_ROUND.labels("canary-analysis").set_to_current_time()
        except Exception:  # the database is away: try again next round
            log.exception("canary analysis round failed")
            metrics.CANARY_ROUNDS.labels("failed").inc()
        time.sleep(settings.canary_check_s)


def _verdict(outcome: str) -> str | None:
    """What the analysis did, as a bounded label: a step (whatever its weight), a promotion or a
    rollback; None when it only waited (held, awaiting a gate or corroboration)."""
    if outcome.startswith("step "):
        return "step"
    return outcome if outcome in (canaries.PROMOTED, canaries.ROLLED_BACK) else None


def _sweep_forever() -> None:
    """Re-send deliveries whose task was lost (the broker was away when the event committed, or a
    worker died). Receivers deduplicate by delivery id, so a rare second send is harmless."""
    while True:
        leadership.wait_to_lead()
        try:
            with transaction() as session:
                overdue = deliveries.overdue_ids(session, slack_s=SWEEP_EVERY_S)
            if overdue:
                log.info("re-sending %d overdue webhook deliveries", len(overdue))
                enqueue_webhook_deliveries(overdue)
            metrics.LAST_ROUND.labels("webhook-sweep").set_to_current_time()
        except Exception:  # the database or broker is away: try again next round
            log.exception("webhook sweep failed")
        time.sleep(SWEEP_EVERY_S)


def _collect_blobs_forever() -> None:
    """Collect the blobs nothing has named for LORAPLANE_BLOB_GC_GRACE_S (registry/blob_gc). A
    round is safe to repeat, to stop anywhere, and to run beside another housekeeper's."""
    settings = get_settings()
    while True:
        leadership.wait_to_lead()
        try:
            collected = blob_gc.collect(UnitOfWork.begin, get_store(), grace_s=settings.blob_gc_grace_s)
            log.info("blob collection: %d listed, %d newly unreferenced, %d collected",
                     collected.listed, collected.marked, len(collected.collected))
            metrics.BLOBS_COLLECTED.inc(len(collected.collected))
            metrics.LAST_ROUND.labels("blob-collection").set_to_current_time()
        except Exception:  # the database or the store is away: try again next round
            log.exception("blob collection round failed")
            metrics.BLOB_ROUND_FAILURES.inc()
        time.sleep(settings.blob_gc_every_s)
