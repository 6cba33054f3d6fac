"""Serving nodes in tests: restartable processes, vLLM's view of its adapters, and promotion of
kit adapters into a pool end to end (upload, a passed parity evaluation, request, approval)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx
from sqlalchemy.engine import Engine

from tests.support import services
from tests.support.evals import upload_dir
from tests.support.promotions import evaluations_of, finish_evaluation, request_promotion


class Restartable:
    """A process a test may stop and start again on the same port."""

    def __init__(self, start: Callable[[], services.Service]) -> None:
        self._start = start
        self.service = start()

    @property
    def url(self) -> str:
        return self.service.url

    def stop(self) -> None:
        self.service.stop()

    def restart(self) -> None:
        self.stop()
        self.service = self._start()


def promoter(admin: httpx.Client, uploader: httpx.Client, engine: Engine, pool: str,
             suite: str) -> Callable[..., dict]:
    """Upload a folder as acme/<name>, record a passed evaluation of `suite`, promote, approve."""

    def run(name: str, folder: Path, alias: str = "production", weight: int | None = None,
            client: httpx.Client | None = None) -> dict:
        version = upload_dir(client or uploader, name if "/" in name else f"acme/{name}", folder)
        if not evaluations_of(admin, version):
            path = f"/v1/adapters/{version['tenant']}/{version['adapter']}/versions/{version['number']}/evaluations"
            assert admin.post(path, json={"suite": suite}).status_code in (200, 202)
            for evaluation in evaluations_of(admin, version):
                finish_evaluation(engine, evaluation["id"])
        created = request_promotion(client or uploader, pool, version, alias, weight=weight)
        assert created.status_code == 201, created.text
        approved = admin.post(f"/v1/promotions/{created.json()['id']}/approve", json={"comment": "ok"})
        assert approved.status_code == 200, approved.text
        return version

    return run


class NodeFleet:
    """Clients of many nodes (or routers) of one pool, each with a token bound to its own id, as
    a real fleet holds them; a token is issued on a node's first use."""

    def __init__(self, admin: httpx.Client, pool: str, role: str = "node") -> None:
        self.admin, self.pool, self.role = admin, pool, role
        self._clients: dict[str, httpx.Client] = {}

    def client(self, instance_id: str) -> httpx.Client:
        if instance_id not in self._clients:
            token = issue_token(self.admin, instance_id, role=self.role, pool=self.pool,
                                instance_id=instance_id)
            self._clients[instance_id] = httpx.Client(
                base_url=self.admin.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        return self._clients[instance_id]

    def close(self) -> None:
        for client in self._clients.values():
            client.close()


def issue_token(admin: httpx.Client, subject: str, **scope) -> str:
    """A new token through the API, e.g.
    issue_token(admin, "node-1", role="node", pool="chat", instance_id="node-1")."""
    response = admin.post("/v1/tokens", json={"subject": subject, **scope})
    assert response.status_code == 201, response.text
    return response.json()["token"]


def served_adapters(vllm_url: str) -> dict[str, str]:
    models = httpx.get(vllm_url + "/v1/models", timeout=10).json()["data"]
    return {m["id"]: m.get("root", "") for m in models if m.get("parent")}


def wait_for(check, *, timeout_s: float = 30, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = check()
        except (httpx.HTTPError, OSError):
            value = None
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def complete(vllm_url: str, model: str, prompt: str, max_tokens: int = 16) -> str:
    response = httpx.post(vllm_url + "/v1/completions", timeout=60, json={
        "model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0})
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["text"]
