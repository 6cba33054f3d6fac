"""Request evaluations and wait for them, through the public API (uploads and suites are
devkit.pipeline_steps)."""

from __future__ import annotations

import time

import httpx
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from registry.tables import BaseModel, EvalSuite, Evaluation


def request_evaluation(client: httpx.Client, version: dict, suite: str) -> dict:
    path = f"/v1/adapters/{version['tenant']}/{version['adapter']}/versions/{version['number']}/evaluations"
    response = client.post(path, json={"suite": suite})
    assert response.status_code == 202, response.text
    return response.json()


def wait_finished(client: httpx.Client, evaluation_id: int, *, timeout_s: float = 240, **params) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        body = client.get(f"/v1/evaluations/{evaluation_id}", params=params).json()
        if body["state"] in ("passed", "failed"):
            return body
        time.sleep(0.5)  # an evaluation takes seconds: no need to ask more often
    raise AssertionError(f"evaluation {evaluation_id} still {body['state']} after {timeout_s}s: {body}")


def wait_idle(engine: Engine, base_model: str, *, timeout_s: float = 300) -> None:
    """Until no evaluation on this base is queued or running (tests that batch need a quiet
    queue)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with Session(engine) as session:
            busy = session.scalar(
                select(func.count()).select_from(Evaluation)
                .join(EvalSuite, EvalSuite.id == Evaluation.suite_id)
                .join(BaseModel, BaseModel.id == EvalSuite.base_model_id)
                .where(BaseModel.name == base_model, Evaluation.state.in_(("queued", "running"))))
        if not busy:
            return
        time.sleep(0.5)  # the poll interval: evaluations take seconds
    raise AssertionError("evaluations still queued or running")
