"""Celery tasks. Arguments are ids only; each task re-reads its rows and is safe to run twice."""

from __future__ import annotations

from registry.task_queue import EVALUATE
from workers.app import app
from workers.evaluation import batch
from workers.settings import get_worker_settings


@app.task(bind=True, name=EVALUATE, max_retries=None, acks_late=True)
def evaluate(self, evaluation_id: int) -> dict:
    # Retries are bounded by the evaluation's own attempts (settings.max_attempts), which survive
    # redelivery, rather than by Celery's per-message counter.
    result = batch.evaluate(evaluation_id, get_worker_settings())
    if result.retry_after_s is not None:
        raise self.retry(countdown=result.retry_after_s)
    return {"recorded": list(result.recorded), "note": result.note}
