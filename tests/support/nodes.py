"""Serving nodes in tests: restartable processes, tokens bound to node ids, and vLLM's view of
its adapters (promotion of kit adapters end to end is devkit.pipeline_steps.promoter)."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

import httpx

from devkit import services
from serving.agent.entries import SERVED_NAME as SERVED_NAME_PATTERN


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


class NodeFleet:
    """Clients of many nodes (or routers) of one pool, each with a token bound to its own id, as
    a real fleet holds them; a token is issued on a node's first use."""

    def __init__(self, admin: httpx.Client, pool: str, role: str = "node") -> None:
        self.admin, self.pool, self.role = admin, pool, role
        self._clients: dict[str, httpx.Client] = {}

    def client(self, instance_id: str) -> httpx.Client:
        if instance_id not in self._clients:
            bound = {"vllm_url": bound_address(instance_id)} if self.role == "node" else {}
            token = issue_token(self.admin, instance_id, role=self.role, pool=self.pool,
                                instance_id=instance_id, **bound)
            self._clients[instance_id] = httpx.Client(
                base_url=self.admin.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        return self._clients[instance_id]

    def close(self) -> None:
        for client in self._clients.values():
            client.close()


class RegistryStandIn:
    """An agent's part for registry-only tests: polls its part of the active set and reports
    loaded, every `period_s`, what a real agent would load ahead (not what is left on demand),
    as if each load took no time."""

    def __init__(self, client: httpx.Client, pool: str, node_id: str, limits: dict[str, int],
                 period_s: float = 0.3) -> None:
        self.client, self.pool, self.node_id, self.limits = client, pool, node_id, limits
        self.period_s = period_s
        self.loads = True  # False: it reports, but loads nothing new (a slow download)
        self.held: dict[str, str] = {}
        self.last_part: dict[str, Any] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                active = self.client.get(f"/v1/pools/{self.pool}/active-set", params={"node": self.node_id}).json()
                self.last_part = active
                wanted = {e["served_name"]: e["digest"] for e in active["entries"] if not e.get("on_demand")}
                self.held = {name: digest for name, digest in self.held.items() if name in wanted}
                if self.loads:
                    self.held = wanted
                self.client.put(f"/v1/pools/{self.pool}/nodes/{self.node_id}/status", json={
                    "generation": active["generation"], "failures": [], "limits": self.limits,
                    "vllm_url": "http://10.0.0.9:8000",
                    "loaded": [{"served_name": n, "digest": d} for n, d in self.held.items()]})
            except httpx.HTTPError:
                pass
            self._stop.wait(self.period_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def bound_address(node_id: str) -> str:
    """The vLLM address bound to a node of a registry-only test: nothing listens there."""
    return f"http://{node_id}.nodes.invalid:8000"


def issue_token(admin: httpx.Client, subject: str, **scope) -> str:
    """A new token through the API, e.g. issue_token(admin, "node-1", role="node", pool="chat",
    instance_id="node-1", vllm_url="http://10.0.0.1:8000")."""
    response = admin.post("/v1/tokens", json={"subject": subject, **scope})
    assert response.status_code == 201, response.text
    return response.json()["token"]


def served_adapters(vllm_url: str) -> dict[str, str]:
    models = httpx.get(vllm_url + "/v1/models", timeout=10).json()["data"]
    return {m["id"]: m.get("root", "") for m in models if m.get("parent")}


def pool_adapters(vllm_url: str) -> set[str]:
    """What agents loaded into a vLLM: the adapters named as a pool's versions are (tenant/name@N),
    not those an operator loaded at the engine's start under names of their own."""
    return {name for name in served_adapters(vllm_url) if re.fullmatch(SERVED_NAME_PATTERN, name)}


def complete(vllm_url: str, model: str, prompt: str, max_tokens: int = 16) -> str:
    response = httpx.post(vllm_url + "/v1/completions", timeout=60, json={
        "model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0})
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["text"]
