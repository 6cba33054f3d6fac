"""A retired version leaves the active set once every live node has moved on: that change to what
a pool serves is audited like every other, in the same transaction."""

from __future__ import annotations

import time

import httpx

from devkit.pipeline_steps import request_promotion
from tests.registry.conftest import PROMO_BASE
from tests.support.promotions import active_set, served

POOL = "audit-retire"


def promote(requester, approver, version) -> None:
    created = request_promotion(requester, POOL, version)
    assert created.status_code == 201, created.text
    approved = approver.post(f"/v1/promotions/{created.json()['id']}/approve", json={"comment": "ok"})
    assert approved.status_code == 200, approved.text


def node_client(admin: httpx.Client, registry) -> httpx.Client:
    created = admin.post("/v1/tokens", json={"subject": "retire-node", "role": "node", "pool": POOL,
                                             "instance_id": "retire-node",
                                             "vllm_url": "http://10.0.0.5:8000"})
    assert created.status_code == 201, created.text
    return httpx.Client(base_url=registry.url, headers={"Authorization": f"Bearer {created.json()['token']}"})


def test_the_end_of_a_retirement_is_an_audit_event(admin, client_for, promo_pools, make_ready,
                                                    uploader, second_reviewer, registry):
    # A pool of its own: another test's live node must not hold the drain up.
    response = admin.post("/v1/pools", json={"name": POOL, "base_model": PROMO_BASE, "dtype": "float32",
                                             "max_loras": 2, "max_cpu_loras": 64, "max_lora_rank": 16})
    assert response.status_code == 201, response.text
    node = node_client(admin, registry)

    def report(generation: int) -> None:
        body = {"generation": generation, "loaded": [], "vllm_url": "http://10.0.0.5:8000",
                "limits": {"max_loras": 2, "max_cpu_loras": 64, "max_lora_rank": 16}}
        response = node.put(f"/v1/pools/{POOL}/nodes/retire-node/status", json=body)
        assert response.status_code == 200, response.text

    v1, v2 = make_ready("retiree"), make_ready("retiree")
    promote(uploader, second_reviewer, v1)
    report(active_set(node, POOL)["generation"])
    promote(uploader, second_reviewer, v2)
    switched = active_set(node, POOL)
    assert "acme/retiree@1" in served(switched)  # retiring: no alias, still loaded
    subject = f"pool/{POOL}/acme/retiree@1"
    query = {"action": "pool.retirement.complete", "subject": subject}
    assert admin.get("/v1/audit", params=query).json()["items"] == []

    time.sleep(0.6)  # the grace period for requests in flight
    report(switched["generation"])

    drained = active_set(node, POOL)
    assert "acme/retiree@1" not in served(drained)
    events = admin.get("/v1/audit", params=query).json()["items"]
    assert len(events) == 1, events
    event = events[0]
    assert (event["actor"], event["action"], event["subject"]) == (
        "system (retirement once traffic moved)", "pool.retirement.complete", subject)
    assert event["before"]["in_active_set"] and event["before"]["retiring"]
    assert event["before"]["retired_in_generation"] == switched["generation"]
    assert event["after"] == {"in_active_set": False, "generation": drained["generation"]}
    assert client_for("acme_admin").get("/v1/audit", params=query).json()["items"] == events
    assert admin.get("/v1/audit/verify").json()["intact"]
    node.close()
