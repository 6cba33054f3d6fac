"""The Celery app. Start a worker for one eval engine with:

    LORAPLANE_ENGINE_BASE_MODEL=<base> celery -A workers.app worker -Q $(loraplane-queue) ...

or simply `loraplane worker`, which sets the queue from the settings.
"""

from __future__ import annotations

import logging

from celery import Celery
from celery.signals import worker_ready

from registry.unit_of_work import transaction
from registry.evaluations import claims
from registry.task_queue import celery_config, enqueue_evaluations
from workers.evaluation import parity
from workers.settings import get_worker_settings

log = logging.getLogger(__name__)

app = Celery("loraplane-workers", include=["workers.tasks"])
app.conf.update(celery_config(get_worker_settings()))


@worker_ready.connect
def requeue_stale(**_) -> None:
    """Send again whatever waits without a live worker: rows whose task was lost while the
    broker was away, or whose worker died. Claims make a duplicate delivery harmless."""
    parity.warm_up()
    settings = get_worker_settings()
    with transaction() as session:
        stale = claims.stale_ids(session, base_model=settings.engine_base_model)
    if stale:
        log.info("re-enqueueing %d waiting evaluations", len(stale))
        enqueue_evaluations([(evaluation_id, settings.engine_base_model) for evaluation_id in stale])
