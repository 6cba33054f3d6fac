"""A pool on the suite's two real vLLM nodes on CPU, each with this pool's agent, and the router
in front, all on the session's registry. Adapters of two tenants are promoted once for the module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devkit import services
from devkit.pipeline_steps import create_suite, promoter
from devkit.services import wait_for
from tests.support.nodes import Restartable, complete, issue_token

POOL = "router-pool"
NODES = ("node-a", "node-b")
ROUTER_SETTINGS = {"LORAPLANE_ROUTER_MAX_INFLIGHT": "16", "LORAPLANE_ROUTER_BATCH_MAX_INFLIGHT": "2",
                   "LORAPLANE_ROUTER_NODE_COOLDOWN_S": "2", "LORAPLANE_ROUTER_KEY_CACHE_S": "1",
                   "LORAPLANE_ROUTER_LOAD_WAIT_S": "3", "LORAPLANE_ROUTER_NODES_POLL_S": "0.5",
                   # Batch requests queue behind a cap of 2 on engines that share two cores with
                   # the rest of the suite; 30 s (the default) was once too short for the last.
                   "LORAPLANE_ROUTER_QUEUE_TIMEOUT_S": "120"}


@pytest.fixture(scope="module")
def router_pool(admin, kit_base, task_kit, vllm_pair) -> dict:
    # max_lora_rank 32 while the nodes' vLLMs run with 16: a version no node can load.
    body = {"name": POOL, "base_model": kit_base, "max_loras": 2, "max_cpu_loras": 8,
            "max_lora_rank": 32, "dtype": "float32"}
    assert admin.post("/v1/pools", json=body).status_code == 201
    create_suite(admin, "router-parity", kit_base, task_kit.suites["digits_to_words"][:4],
                 {"parity": {"max_logprob_diff": 0.01}})

    return {"name": POOL,
            "node_urls": {node_id: vllm.url for node_id, vllm in zip(NODES, (vllm_pair["a"], vllm_pair["b"]))},
            "node_tokens": {node_id: issue_token(admin, node_id, role="node", pool=POOL, instance_id=node_id,
                                                 vllm_url=vllm.url)
                            for node_id, vllm in zip(NODES, (vllm_pair["a"], vllm_pair["b"]))},
            "router_token": issue_token(admin, "router-1", role="router", pool=POOL, instance_id="router-1"),
            "acme_batch": issue_token(admin, "acme-nightly", role="app", tenant="acme", tier="batch"),
            "globex_app": issue_token(admin, "globex-app", role="app", tenant="globex")}


@pytest.fixture(scope="module")
def nodes(service_dir: Path, vllm_pair, router_pool, registry) -> Iterator[dict[str, Restartable]]:
    """The suite's serving pair as node-a and node-b, each with this pool's agent."""
    started = dict(zip(NODES, (vllm_pair["a"], vllm_pair["b"])))
    agents = [services.start_agent(
        service_dir / f"router-{node_id}" / "agent", pool=POOL, vllm_url=node.url, registry_url=registry.url,
        token=router_pool["node_tokens"][node_id], node_id=node_id, metrics_port=services.free_port())
        for node_id, node in started.items()]
    yield started
    for agent in agents:
        agent.stop()


@pytest.fixture(scope="module")
def router(service_dir: Path, router_pool, registry, nodes) -> Iterator[services.Service]:
    service = services.start_router(service_dir / "router", pool=POOL, registry_url=registry.url,
                                    token=router_pool["router_token"], settings=ROUTER_SETTINGS)
    yield service
    service.stop()


@pytest.fixture(scope="module")
def promote(admin, uploader, engine, router_pool):
    return promoter(admin, uploader, engine, POOL, "router-parity")


@pytest.fixture(scope="module")
def served(promote, task_kit, client_for, nodes, router, admin) -> dict[str, dict]:
    """acme/r-digits and acme/r-reverse (different tasks), and globex/r-private; each with its answer
    to one prompt, read straight from a node's vLLM under its served name."""
    prompt = task_kit.suites["digits_to_words"][0]["prompt"]
    promote("r-digits", task_kit.adapters["digits_to_words"])
    promote("r-reverse", task_kit.adapters["reverse_words"])
    promote("globex/r-private", task_kit.adapters["digits_to_words_v2"],
            client=client_for("globex_uploader"))
    names = ("acme/r-digits@1", "acme/r-reverse@1", "globex/r-private@1")
    wait_until_served(admin, set(names))
    answers = {name: complete(nodes[NODES[0]].url, name, prompt) for name in names}
    assert answers["acme/r-digits@1"] != answers["acme/r-reverse@1"], answers  # told apart
    return {"prompt": prompt, "answers": answers}


def wait_until_served(admin: httpx.Client, names: set[str], nodes: tuple[str, ...] = NODES,
                      timeout_s: float = 60) -> None:
    def serving() -> bool:
        reports = {n["node_id"]: set(n["serving"]) for n in
                   admin.get(f"/v1/pools/{POOL}/rollout").json()["nodes"]}
        return all(names <= reports.get(node, set()) for node in nodes)

    wait_for(serving, timeout_s=timeout_s, what=f"{sorted(names)} on {nodes}")


def router_metric(router: services.Service, name: str, **labels: str) -> float:
    """The sum of a router metric over the series whose labels include `labels`."""
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for family in text_string_to_metric_families(httpx.get(router.env["METRICS_URL"]).text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total
