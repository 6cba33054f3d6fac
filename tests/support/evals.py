"""Upload kit adapters, create suites and wait for evaluations, through the public API."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from registry.tables import BaseModel, EvalSuite, Evaluation

PEFT_FILES = ("adapter_config.json", "adapter_model.safetensors")


def upload_dir(client: httpx.Client, adapter: str, folder: Path) -> dict:
    parts = [("file", (name, (folder / name).read_bytes())) for name in PEFT_FILES]
    response = client.post(f"/v1/adapters/{adapter}/versions", files=parts)
    assert response.status_code in (200, 201), response.text
    return response.json()


def create_suite(admin: httpx.Client, name: str, base: str, rows: list[dict], metrics: dict,
                 **generation) -> dict:
    body = {"name": name, "base_model": base, "examples": rows, "metrics": metrics,
            "generation": {"max_tokens": 16, **generation}}
    response = admin.post("/v1/eval-suites", json=body)
    assert response.status_code == 201, response.text
    return response.json()


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
        time.sleep(0.5)
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
        time.sleep(0.5)
    raise AssertionError("evaluations still queued or running")
