"""Celery tasks. Arguments are ids only; each task re-reads its rows and is safe to run twice."""

from __future__ import annotations

import logging

from registry.task_queue import EVALUATE
from workers.app import app
from workers.evaluation import batch, faults
from workers.settings import get_worker_settings

log = logging.getLogger(__name__)


@app.task(bind=True, name=EVALUATE, max_retries=None, acks_late=True)
def evaluate(self, evaluation_id: int) -> dict:
    # Retries are bounded by the evaluation's own attempts (settings.max_attempts), which survive
    # redelivery, rather than by Celery's per-message counter.
    settings = get_worker_settings()
    try:
        result = batch.evaluate(evaluation_id, settings)
    except Exception as error:
        # The evaluation's own faults become outcomes; what gets here failed around it, while
        # claiming or recording. A database that is away cannot count an attempt on the row, so
        # Celery's counter bounds those retries; past it, the row waits for the next worker's sweep.
        if not faults.is_transient(error) or self.request.retries >= settings.max_attempts:
            raise
        delay = settings.backoff_s(self.request.retries + 1)
        log.warning("%s; retrying evaluation %s in %.0f s", faults.transient_reason(error),
                    evaluation_id, delay)
        raise self.retry(countdown=delay) from error
    if result.retry_after_s is not None:
        raise self.retry(countdown=result.retry_after_s)
    return {"recorded": list(result.recorded), "note": result.note}
