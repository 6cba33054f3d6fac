"""A serving node: the suite's real vLLM on CPU with the task kit's base (tests/serving/conftest.py),
its agent, and a registry process of its own (same database) that tests may stop and start again."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from devkit import services
from devkit.pipeline_steps import create_suite, promoter
from tests.serving.agent.stand_ins import StandInVllm, Store
from tests.support.nodes import Restartable, bound_address, issue_token

POOL = "node-pool"


@pytest.fixture(scope="module")
def node_pool(admin, kit_base, task_kit) -> dict:
    # max_lora_rank 32 while the node's vLLM runs with 16: a misconfigured node, for the refusal test.
    body = {"name": POOL, "base_model": kit_base, "max_loras": 2, "max_cpu_loras": 8,
            "max_lora_rank": 32, "dtype": "float32"}
    assert admin.post("/v1/pools", json=body).status_code == 201
    create_suite(admin, "node-parity", kit_base, task_kit.suites["digits_to_words"][:4],
                 {"parity": {"max_logprob_diff": 0.01}})
    tokens: dict[str, str] = {}

    def token_for(node_id: str) -> str:
        """Each node's own token, bound to its id."""
        if node_id not in tokens:
            tokens[node_id] = issue_token(admin, node_id, role="node", pool=POOL, instance_id=node_id,
                                          vllm_url=bound_address(node_id))
        return tokens[node_id]

    return {"name": POOL, "token_for": token_for}


@pytest.fixture(scope="module")
def node_vllm(vllm_pair) -> Restartable:
    """The suite's first serving vLLM; it holds the static adapter "static-reverse", loaded at its
    start. It runs with max_lora_rank 16."""
    return vllm_pair["a"]


@pytest.fixture(scope="module")
def second_node_vllm(vllm_pair) -> Restartable:
    return vllm_pair["b"]


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
                                     registry_url=agent_registry.url, token=node_pool["token_for"](node_id),
                                     node_id=node_id, metrics_port=services.free_port())
        started.append(agent)
        return agent

    yield start
    for agent in started:
        services.stop_group(agent)


@pytest.fixture(scope="module")
def promote(admin, uploader, engine, node_pool):
    """Upload a kit adapter as acme/<name>, record a passed parity evaluation, promote and approve."""
    return promoter(admin, uploader, engine, POOL, "node-parity")


@pytest.fixture
def store() -> Iterator[Store]:
    """An artifact store on loopback, for tests of the agent without a registry or vLLM."""
    served = Store()
    yield served
    served.close()


@pytest.fixture
def vllm() -> Iterator[StandInVllm]:
    served = StandInVllm()
    yield served
    served.close()
