"""Enqueue worker tasks by name. The registry never imports workers/: it only knows the names.

Tasks are sent after the transaction that created their rows has committed, so a worker never
looks for a row that is not there yet. A send that fails leaves the row queued; workers sweep
queued rows when they start, so nothing is lost when the broker is briefly away.
"""

from __future__ import annotations

import hashlib
import logging
import re
from functools import lru_cache
from typing import TYPE_CHECKING

from registry.settings import RegistrySettings, get_settings

if TYPE_CHECKING:
    from celery import Celery

EVALUATE = "loraplane.evaluate"
log = logging.getLogger(__name__)


def celery_config(settings: RegistrySettings) -> dict:
    config = {
        "broker_url": settings.broker_url,
        "result_backend": settings.result_backend,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_expires": 7 * 24 * 3600,
        "broker_connection_retry_on_startup": True,
        # A worker takes one task at a time and acknowledges it only when done, so a task whose
        # worker dies is delivered again instead of lost.
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
    }
    if settings.broker_url.startswith("filesystem://"):
        folder = settings.broker_dir()
        for sub in ("queue", "processed", "control"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        config["broker_transport_options"] = {
            "data_folder_in": str(folder / "queue"),
            "data_folder_out": str(folder / "queue"),
            "processed_folder": str(folder / "processed"),
            "control_folder": str(folder / "control"),
            "store_processed": False,
        }
    else:
        config["broker_transport_options"] = {
            "visibility_timeout": settings.broker_visibility_timeout_s,
            # Look for abandoned tasks often enough that a short timeout means something.
            "unacked_restore_interval": max(1, min(10, settings.broker_visibility_timeout_s // 4)),
            "unacked_restore_throttle": 1,
        }
    return config


@lru_cache
def _producer() -> Celery:
    # Imported here: services that request tasks import this module, and need no Celery until
    # a task is really sent.
    from celery import Celery

    app = Celery("loraplane-registry")
    app.conf.update(celery_config(get_settings()))
    return app


def evaluation_queue(base_model: str) -> str:
    """One queue per base model: a worker drives one engine, which serves one base. The name is
    made safe for every transport (the folder broker puts it in file names)."""
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", base_model)[:60]
    return f"evaluations.{safe}.{hashlib.sha256(base_model.encode()).hexdigest()[:8]}"


def enqueue_evaluations(evaluations: list[tuple[int, str]]) -> None:
    """Send (evaluation id, base model name) pairs. Best effort: a failure is logged, and the
    queued rows wait for the next worker sweep."""
    for evaluation_id, base_model in evaluations:
        try:
            _producer().send_task(EVALUATE, args=[evaluation_id], queue=evaluation_queue(base_model),
                                  retry=True,
                                  retry_policy={"max_retries": 2, "interval_start": 0.2,
                                                "interval_step": 0.5, "interval_max": 1})
        except Exception as error:  # the broker's own errors vary by transport
            log.warning("could not enqueue evaluation %s (%s); a worker sweep will pick it up",
                        evaluation_id, type(error).__name__)


DELIVER_WEBHOOK = "loraplane.deliver_webhook"
HOUSEKEEPING_QUEUE = "housekeeping"


def enqueue_webhook_deliveries(delivery_ids: list[int]) -> None:
    """One try, no waiting: this runs after a request's commit, which must not hang on a broker
    that is away. The housekeeping worker sweeps pending rows every minute."""
    for delivery_id in delivery_ids:
        try:
            _producer().send_task(DELIVER_WEBHOOK, args=[delivery_id], queue=HOUSEKEEPING_QUEUE,
                                  retry=False)
        except Exception as error:  # the broker's own errors vary by transport
            log.warning("could not enqueue webhook delivery %s (%s); the sweep will send it",
                        delivery_id, type(error).__name__)
            return
