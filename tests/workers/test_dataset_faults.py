"""Evaluation faults that no retry mends fail at once, with their reason; the ones that may pass
are retried a bounded number of times.

No vLLM here: each worker's engine is a closed port or a listener that never answers, so an
evaluation that reached the engine would end with an engine fault, not the reason asserted.
"""

from __future__ import annotations

import hashlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from devkit import services
from devkit.pipeline_steps import create_suite, upload_dir
from devkit.tiny_model import build_adapter
from registry.adapters.artifact import blob_key
from registry.tables import AuditEvent, EvalSuite, Evaluation
from tests.conftest import BUCKET, register_base
from tests.support.eval_stack import Worker, worker_env
from tests.support.evals import request_evaluation, wait_finished
from devkit.units_of_work import unit_of_work

OFFLINE_BASE, SILENT_BASE = "dataset-faults-base", "dying-worker-base"
METRICS = {"exact_match": {"min": 0.5}}


@pytest.fixture(scope="module")
def offline_engine_url() -> str:
    return f"http://127.0.0.1:{services.free_port()}"  # nothing listens here


@pytest.fixture(scope="module")
def offline_worker(service_dir, database_url, s3, redis, admin, tiny_base,
                   offline_engine_url) -> Iterator[Worker]:
    register_base(admin, OFFLINE_BASE, tiny_base)
    env = worker_env(database_url, s3, redis, engine_url=offline_engine_url, base=OFFLINE_BASE,
                     LORAPLANE_MAX_ATTEMPTS="3", LORAPLANE_RETRY_BACKOFF_S="0.5",
                     LORAPLANE_RETRY_BACKOFF_MAX_S="1")
    worker = Worker(service_dir / "worker-dataset-faults", env, "dataset-faults")
    yield worker
    worker.stop()


def adapter_for(base: str, tiny_base: Path, tmp_path_factory) -> Path:
    return build_adapter(tiny_base, tmp_path_factory.mktemp(base) / "adapter", seed=5,
                         base_model_name=base)


def overwrite_blob(s3_client, engine, suite: str) -> None:
    """The object under the suite's digest no longer holds its rows (the store is not trusted)."""
    with Session(engine) as session:
        sha256 = session.scalar(select(EvalSuite.dataset_sha256).where(EvalSuite.name == suite))
    s3_client.put_object(Bucket=BUCKET, Key=blob_key(sha256), Body=b"overwritten\n")


def delete_blob(s3_client, engine, suite: str) -> None:
    """The dataset's object is gone from the store: no retry brings it back."""
    with Session(engine) as session:
        sha256 = session.scalar(select(EvalSuite.dataset_sha256).where(EvalSuite.name == suite))
    s3_client.delete_object(Bucket=BUCKET, Key=blob_key(sha256))


def point_at_rows_without_a_reference(s3_client, engine, suite: str) -> None:
    """The suite's row names intact bytes that are not valid rows (the database is not trusted)."""
    data = b'{"prompt": "only a prompt"}\n'
    sha256 = hashlib.sha256(data).hexdigest()
    s3_client.put_object(Bucket=BUCKET, Key=blob_key(sha256), Body=data)
    with unit_of_work(engine) as session:
        session.execute(update(EvalSuite).where(EvalSuite.name == suite).values(dataset_sha256=sha256))


@pytest.mark.parametrize(("suite", "damage", "reason"), [
    ("damaged-dataset", overwrite_blob,
     "the dataset of eval suite 'damaged-dataset' is damaged in the store. Recreate the suite "
     "under a new name."),
    ("deleted-dataset", delete_blob,
     "the dataset of eval suite 'deleted-dataset' is missing from the store. Recreate the suite "
     "under a new name."),
    ("rowless-dataset", point_at_rows_without_a_reference,
     "the dataset of eval suite 'rowless-dataset' cannot be read: line 1: reference: Field "
     "required. Recreate the suite under a new name."),
])
def test_an_unreadable_dataset_fails_after_one_attempt_with_its_reason(
        admin, uploader, registry, engine, s3_client, tiny_base, tmp_path_factory, offline_worker,
        offline_engine_url, suite, damage, reason):
    rows = [{"prompt": f"{suite} {i}:", "reference": f" row {i}"} for i in range(3)]  # a blob of its own
    create_suite(admin, suite, OFFLINE_BASE, rows, METRICS)
    version = upload_dir(uploader, "acme/dataset-faults",
                         adapter_for(OFFLINE_BASE, tiny_base, tmp_path_factory))
    damage(s3_client, engine, suite)

    result = wait_finished(uploader, request_evaluation(uploader, version, suite)["id"], timeout_s=90)

    assert result["state"] == "failed", result
    assert result["reason"] == reason
    assert result["attempts"] == 1  # not retried: the engine, which is down, was never asked
    assert result["engine"] == {"url": offline_engine_url}
    assert result["metrics"] == {} and result["failing_metrics"] == []
    assert result["examples"]["items"] == []
    with Session(engine) as session:
        failed_events = session.scalar(select(func.count()).select_from(AuditEvent).where(
            AuditEvent.action == "evaluation.failed",
            AuditEvent.after["evaluation"].as_integer() == result["id"]))
    assert failed_events == 1
    version_now = uploader.get(f"/v1/adapters/acme/dataset-faults/versions/{version['number']}")
    assert version_now.json()["state"] == "evaluated"
    assert httpx.get(f"{registry.url}/readyz").status_code == 200


@pytest.fixture
def silent_engine() -> Iterator[str]:
    """An engine that accepts connections and never answers: a worker waits on it until killed."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def test_a_worker_that_dies_on_every_attempt_gives_up_once_the_attempts_are_spent(
        admin, uploader, service_dir, database_url, s3, redis, engine, tiny_base, tmp_path_factory,
        silent_engine):
    register_base(admin, SILENT_BASE, tiny_base)
    create_suite(admin, "dying-worker", SILENT_BASE,
                 [{"prompt": "dying 1:", "reference": " one"}], METRICS)
    version = upload_dir(uploader, "acme/dying-worker",
                         adapter_for(SILENT_BASE, tiny_base, tmp_path_factory))
    env = worker_env(database_url, s3, redis, engine_url=silent_engine, base=SILENT_BASE,
                     LORAPLANE_MAX_ATTEMPTS="1", LORAPLANE_ENGINE_REQUEST_TIMEOUT_S="600")
    worker = Worker(service_dir / "worker-dying", env, "dying")
    try:
        evaluation_id = request_evaluation(uploader, version, "dying-worker")["id"]
        deadline = time.monotonic() + 60
        while True:  # claimed, and waiting on the engine
            with Session(engine) as session:
                row = session.get(Evaluation, evaluation_id)
            if row.state == "running":
                break
            assert time.monotonic() < deadline, "the worker never claimed the evaluation"
            time.sleep(0.1)  # the poll interval

        worker.restart()  # SIGKILL first: as if the evaluation took the worker down
        result = wait_finished(uploader, evaluation_id, timeout_s=90)
    finally:
        worker.stop()

    assert result["state"] == "failed", result
    assert result["attempts"] == 2  # the claim that died, then the one that gave up
    assert result["reason"] == ("its worker stopped during every attempt; gave up after 1 attempt. "
                                "Check the engine, then request the evaluation again.")
    assert result["metrics"] == {} and result["examples"]["items"] == []
