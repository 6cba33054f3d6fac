"""A serving node: a real vLLM on CPU with the task kit's base, its agent, and a registry process
of its own (same database) that tests may stop and start again."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from loraplane.engine import EngineSpec
from tests.conftest import KIT_BASE
from tests.support import services
from tests.support.evals import create_suite, upload_dir
from tests.support.promotions import evaluations_of, finish_evaluation, request_promotion

POOL = "node-pool"


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


@pytest.fixture(scope="module")
def node_pool(admin, kit_base, task_kit) -> dict:
    # max_lora_rank 32 while the node's vLLM runs with 16: a misconfigured node, for the refusal test.
    body = {"name": POOL, "base_model": kit_base, "max_loras": 2, "max_cpu_loras": 8,
            "max_lora_rank": 32, "dtype": "float32"}
    assert admin.post("/v1/pools", json=body).status_code == 201
    create_suite(admin, "node-parity", kit_base, task_kit.suites["digits_to_words"][:4],
                 {"parity": {"max_logprob_diff": 0.01}})
    token = admin.post("/v1/tokens", json={"subject": "node-agents", "role": "node", "pool": POOL}).json()
    return {"name": POOL, "token": token["token"]}


@pytest.fixture(scope="module")
def node_vllm(service_dir: Path, task_kit) -> Iterator[Restartable]:
    port, folder = services.free_port(), service_dir / "node-vllm"
    spec = EngineSpec(model_dir=task_kit.base_dir, served_name=KIT_BASE, port=port, max_loras=2,
                      max_cpu_loras=8, max_lora_rank=16,
                      lora_modules=(("static-reverse", str(task_kit.adapters["reverse_words"])),))
    node = Restartable(lambda: services.start_vllm(folder, spec))
    yield node
    node.stop()
    shutil.rmtree(folder / "cache", ignore_errors=True)


@pytest.fixture(scope="module")
def second_node_vllm(service_dir: Path, task_kit) -> Iterator[Restartable]:
    port, folder = services.free_port(), service_dir / "node-vllm-2"
    spec = EngineSpec(model_dir=task_kit.base_dir, served_name=KIT_BASE, port=port, max_loras=2,
                      max_cpu_loras=8, max_lora_rank=16)
    node = Restartable(lambda: services.start_vllm(folder, spec))
    yield node
    node.stop()
    shutil.rmtree(folder / "cache", ignore_errors=True)


@pytest.fixture(scope="module")
def agent_registry(service_dir: Path, registry: services.Service) -> Iterator[Restartable]:
    env = {k: v for k, v in registry.env.items() if k.startswith("LORAPLANE_")}
    env.pop("LORAPLANE_PUBLIC_URL", None)
    env.pop("LORAPLANE_DATA_DIR", None)
    port = services.free_port()
    server = Restartable(lambda: services.start_registry(service_dir / "agent-registry", env, port=port))
    yield server
    server.stop()


@pytest.fixture
def start_agent(service_dir, node_pool, node_vllm, agent_registry):
    started: list[services.Service] = []

    def start(node_id: str = "node-1", vllm_url: str | None = None, fresh: bool = True) -> services.Service:
        folder = service_dir / f"agent-{node_id}"
        if fresh:
            shutil.rmtree(folder, ignore_errors=True)
        agent = services.start_agent(folder, pool=POOL, vllm_url=vllm_url or node_vllm.url,
                                     registry_url=agent_registry.url, token=node_pool["token"],
                                     node_id=node_id, metrics_port=services.free_port())
        started.append(agent)
        return agent

    yield start
    for agent in started:
        services.stop_group(agent)


@pytest.fixture(scope="module")
def promote(admin, uploader, engine, node_pool):
    """Upload a kit adapter as acme/<name>, record a passed parity evaluation, promote and approve."""

    def run(name: str, folder: Path, alias: str = "production") -> dict:
        version = upload_dir(uploader, f"acme/{name}", folder)
        if not evaluations_of(admin, version):
            path = f"/v1/adapters/acme/{name}/versions/{version['number']}/evaluations"
            assert admin.post(path, json={"suite": "node-parity"}).status_code in (200, 202)
            for evaluation in evaluations_of(admin, version):
                finish_evaluation(engine, evaluation["id"])
        created = request_promotion(uploader, POOL, version, alias)
        assert created.status_code == 201, created.text
        approved = admin.post(f"/v1/promotions/{created.json()['id']}/approve", json={"comment": "ok"})
        assert approved.status_code == 200, approved.text
        return version

    return run


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


def complete(vllm_url: str, model: str, prompt: str) -> str:
    response = httpx.post(vllm_url + "/v1/completions", timeout=60, json={
        "model": model, "prompt": prompt, "max_tokens": 16, "temperature": 0})
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["text"]
