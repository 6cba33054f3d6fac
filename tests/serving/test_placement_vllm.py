"""Placement on two real vLLM nodes on CPU: a pool with more versions than one node keeps
resident. Each node loads only its part, never more than its max_cpu_loras, and the router
answers every version, each from a node that holds it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from devkit import services
from devkit.pipeline_steps import create_suite, promoter
from devkit.services import wait_for
from tests.support.nodes import issue_token, pool_adapters

POOL = "spread-pool"
NODES = ("spread-a", "spread-b")
MAX_CPU_LORAS = 2  # three versions: more than one node holds, within what two hold
ADAPTERS = {"acme/spread-digits": "digits_to_words", "acme/spread-reverse": "reverse_words",
            "acme/spread-digits-v2": "digits_to_words_v2"}


@pytest.fixture(scope="module")
def spread_pool(admin, kit_base, task_kit, vllm_pair) -> dict:
    body = {"name": POOL, "base_model": kit_base, "max_loras": 1, "max_cpu_loras": MAX_CPU_LORAS,
            "max_lora_rank": 16, "dtype": "float32"}
    assert admin.post("/v1/pools", json=body).status_code == 201
    create_suite(admin, "spread-parity", kit_base, task_kit.suites["digits_to_words"][:2],
                 {"parity": {"max_logprob_diff": 0.01}})
    return {"node_tokens": {node_id: issue_token(admin, node_id, role="node", pool=POOL, instance_id=node_id,
                                                 vllm_url=vllm.url)
                            for node_id, vllm in zip(NODES, (vllm_pair["a"], vllm_pair["b"]))},
            "router_token": issue_token(admin, "spread-router", role="router", pool=POOL,
                                        instance_id="spread-router"),
            "app_key": issue_token(admin, "spread-app", role="app", tenant="acme")}


@pytest.fixture(scope="module")
def stack(service_dir: Path, vllm_pair, spread_pool, registry) -> Iterator[dict]:
    """The suite's serving pair as spread-a and spread-b, with this pool's agents and a router."""
    vllms = dict(zip(NODES, (vllm_pair["a"], vllm_pair["b"])))
    running: list[services.Service] = []
    try:
        for node_id, vllm in vllms.items():
            running.append(services.start_agent(
                service_dir / node_id / "agent", pool=POOL, vllm_url=vllm.url, registry_url=registry.url,
                token=spread_pool["node_tokens"][node_id], node_id=node_id, metrics_port=services.free_port()))
        router = services.start_router(service_dir / "spread-router", pool=POOL, registry_url=registry.url,
                                       token=spread_pool["router_token"],
                                       settings={"LORAPLANE_ROUTER_NODES_POLL_S": "0.5",
                                                 "LORAPLANE_ROUTER_LOAD_WAIT_S": "5"})
        running.append(router)
        yield {"vllms": vllms, "router": router}
    finally:
        for service in reversed(running):
            service.stop()


def test_more_versions_than_a_node_holds_are_all_served_within_capacity(
        stack, spread_pool, admin, uploader, engine, task_kit):
    promote = promoter(admin, uploader, engine, POOL, "spread-parity")
    # Both nodes must be live first: the capacity gate counts the slots of live nodes.
    wait_for(lambda: len(admin.get(f"/v1/pools/{POOL}/rollout").json()["nodes"]) == 2, what="two nodes")
    served = {adapter: promote(adapter, task_kit.adapters[kit_name])["served_name"]
              for adapter, kit_name in ADAPTERS.items()}

    placement = wait_for(lambda: (body := admin.get(f"/v1/pools/{POOL}/placement").json())
                         and body["mode"] == "spread" and body, what="a spread placement")
    assert placement["unplaced"] == []
    assert all(len(node["targets"]) <= MAX_CPU_LORAS for node in placement["nodes"])
    wait_for(lambda: admin.get(f"/v1/pools/{POOL}/rollout").json()["nodes_converged"] == 2,
             timeout_s=120, what="both nodes converged")

    # What each vLLM really holds: its part, never more than it keeps resident.
    held = {node_id: pool_adapters(vllm.url) for node_id, vllm in stack["vllms"].items()}
    targets = {node["node_id"]: set(node["targets"]) for node in placement["nodes"]}
    assert held == targets
    assert all(len(names) <= MAX_CPU_LORAS for names in held.values())
    assert set().union(*held.values()) == set(served.values())

    headers = {"Authorization": f"Bearer {spread_pool['app_key']}"}
    for adapter, kit_name in ADAPTERS.items():
        row = task_kit.suites[kit_name.removesuffix("_v2")][0]
        response = httpx.post(stack["router"].url + "/v1/completions", headers=headers, timeout=60, json={
            "model": adapter, "prompt": row["prompt"], "max_tokens": 16, "temperature": 0})
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["text"].strip() == row["reference"].strip()
        assert response.headers["x-loraplane-served-name"] == served[adapter]
        assert served[adapter] in held[response.headers["x-loraplane-node"]]


def test_a_database_edit_that_swaps_approved_digests_is_refused_by_every_node(stack, admin, engine):
    """Someone with the database, not the signing key, points each version at another version's
    bytes (all three, so that every node's part holds swapped entries) and bumps the generation.
    Every node refuses every swapped entry it is given and never serves the swapped bytes; what it
    held stays loaded (its drift shows the approved bytes against the edited digest)."""
    before = {n["node_id"]: set(n["serving"]) for n in admin.get(f"/v1/pools/{POOL}/rollout").json()["nodes"]}
    assert all(before.values()), before  # the test above left both nodes serving their part
    with engine.begin() as db:
        approved = {row.id: (row.digest, row.files) for row in db.execute(text(
            "SELECT v.id, v.digest, v.files FROM adapter_versions v JOIN pool_aliases a ON a.version_id = v.id "
            "JOIN pools p ON p.id = a.pool_id WHERE p.name = :pool ORDER BY v.id"), {"pool": POOL})}
    ids = sorted(approved)
    swapped = {vid: approved[ids[(i + 1) % len(ids)]] for i, vid in enumerate(ids)}
    try:
        edit_versions(engine, swapped)

        def all_refused():
            nodes = {n["node_id"]: n for n in admin.get(f"/v1/pools/{POOL}/rollout").json()["nodes"]}
            refused = {node_id: {f["served_name"] for f in n["failures"] if f["reason"].startswith(
                "refused, not proven: the attestation approves digest")} for node_id, n in nodes.items()}
            return refused == before and nodes
        nodes = wait_for(all_refused, timeout_s=60, what="every node refusing its swapped entries")

        for node_id, node in nodes.items():
            assert node["serving"] == [], node  # nothing answers with the swapped bytes
            assert set(node["drift"]["wrong_digest"]) == before[node_id], node
            assert pool_adapters(stack["vllms"][node_id].url) == before[node_id]
    finally:
        edit_versions(engine, approved)
    wait_for(lambda: admin.get(f"/v1/pools/{POOL}/rollout").json()["nodes_converged"] == 2,
             timeout_s=60, what="both nodes converged again once the edit was undone")


def edit_versions(engine, versions: dict[int, tuple[str, list]]) -> None:
    """Write digests and file lists straight into the database, and bump the generation as a
    change would (the registry re-reads generations every second)."""
    with engine.begin() as db:
        for vid, (digest, files) in versions.items():
            # Digests are unique within an adapter; these move across adapters.
            db.execute(text("UPDATE adapter_versions SET digest = :d, files = CAST(:f AS JSON) WHERE id = :id"),
                       {"d": digest, "f": json.dumps(files), "id": vid})
        db.execute(text("UPDATE pools SET generation = generation + 1 WHERE name = :pool"), {"pool": POOL})
