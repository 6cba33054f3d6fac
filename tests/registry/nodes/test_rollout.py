"""Nodes report what they applied; the pool's rollout shows convergence, drift, failures and
nodes that stopped reporting."""

from __future__ import annotations

import time

import httpx
import pytest

from devkit.pipeline_steps import request_promotion
from tests.support.asserts import assert_refused
from tests.support.nodes import NodeFleet, bound_address
from tests.support.promotions import active_set

LIMITS = {"max_loras": 2, "max_cpu_loras": 8, "max_lora_rank": 16}


@pytest.fixture(scope="module")
def rollout_pool(admin, promo_pools, make_ready, uploader, second_reviewer, registry):
    assert admin.post("/v1/pools", json={"name": "rollout", "base_model": "promo-base", **LIMITS}).status_code == 201
    version = make_ready("rolled")
    promotion = request_promotion(uploader, "rollout", version).json()
    assert second_reviewer.post(f"/v1/promotions/{promotion['id']}/approve",
                                json={"comment": "ok"}).status_code == 200
    fleet = NodeFleet(admin, "rollout")
    yield {"node": fleet, "version": version}
    fleet.close()


def report(node: NodeFleet | httpx.Client, node_id: str, **body) -> httpx.Response:
    """As the node itself (a fleet's client for that id), or as the given client."""
    full = {"generation": 0, "loaded": [], "failures": [], "vllm_url": "http://10.0.0.9:8000",
            "limits": LIMITS, **body}
    client = node.client(node_id) if isinstance(node, NodeFleet) else node
    return client.put(f"/v1/pools/rollout/nodes/{node_id}/status", json=full)


def test_rollout_shows_convergence_drift_failures_and_stale_nodes(rollout_pool, admin, client_for):
    node, version = rollout_pool["node"], rollout_pool["version"]
    current = active_set(admin, "rollout")["generation"]
    good = {"served_name": "acme/rolled@1", "digest": version["digest"]}

    assert report(node, "node-ok", generation=current, loaded=[good]).status_code == 200
    assert report(node, "node-behind", generation=current - 1, loaded=[]).status_code == 200
    assert report(node, "node-odd", generation=current, failures=[
        {"served_name": "acme/rolled@1", "reason": "sha256 mismatch: the download is not the approved bytes"}],
        loaded=[{"served_name": "acme/rolled@1", "digest": "0" * 64},
                {"served_name": "globex/stray@2", "digest": "1" * 64}]).status_code == 200

    rollout = admin.get("/v1/pools/rollout/rollout").json()
    nodes = {n["node_id"]: n for n in rollout["nodes"]}
    assert rollout["generation"] == current and rollout["nodes_total"] == 3
    assert rollout["nodes_converged"] == 1 and nodes["node-ok"]["converged"]
    assert nodes["node-behind"]["generation"] == current - 1
    assert nodes["node-behind"]["drift"]["missing"] == ["acme/rolled@1"]
    assert nodes["node-odd"]["drift"] == {"missing": [], "extra": ["globex/stray@2"],
                                          "wrong_digest": ["acme/rolled@1"]}
    assert nodes["node-odd"]["failures"][0]["reason"].startswith("sha256 mismatch")
    assert not any(n["stale"] for n in nodes.values())

    acme_view = {n["node_id"]: n for n in client_for("acme_reviewer").get("/v1/pools/rollout/rollout").json()["nodes"]}
    assert acme_view["node-odd"]["drift"]["extra"] == []  # another tenant's name stays hidden
    assert acme_view["node-ok"]["vllm_url"] is None and acme_view["node-ok"]["limits"] is None
    assert nodes["node-ok"]["vllm_url"] == bound_address("node-ok") and nodes["node-ok"]["limits"] == LIMITS

    time.sleep(3.2)  # the registry under test counts a node stale after 3 s
    assert report(node, "node-ok", generation=current, loaded=[good]).status_code == 200
    later = {n["node_id"]: n for n in admin.get("/v1/pools/rollout/rollout").json()["nodes"]}
    assert not later["node-ok"]["stale"] and later["node-behind"]["stale"] and later["node-odd"]["stale"]


@pytest.mark.parametrize(("node_id", "body", "status", "code", "message"), [
    ("node-x", {"generation": 10**6}, 422, "generation_ahead", "is ahead of pool 'rollout'"),
    ("Node X", {}, 422, "invalid_name", "invalid node name"),
    ("node-x", {"loaded": [{"served_name": "acme/rolled@1", "digest": "xyz"}]}, 422, "invalid_request", "digest"),
    ("node-x", {"loaded": [{"served_name": "../etc", "digest": "0" * 64}]}, 422, "invalid_request", "served_name"),
    ("node-x", {"vllm_url": "file:///etc/passwd"}, 422, "invalid_request", "vllm_url"),
    ("node-x", {"limits": {"max_loras": 0, "max_cpu_loras": 1, "max_lora_rank": 8}}, 422, "invalid_request", "max_loras"),
])
def test_bad_reports_are_refused_and_nothing_is_stored(rollout_pool, admin, node_id, body, status, code, message):
    before = admin.get("/v1/pools/rollout/rollout").json()["nodes"]
    # No token can be bound to an invalid name: the global admin is who reaches the name check.
    reporter = rollout_pool["node"] if node_id == "node-x" else admin
    assert_refused(report(reporter, node_id, **body), status, code, message)
    after = admin.get("/v1/pools/rollout/rollout").json()["nodes"]
    assert [n["node_id"] for n in after] == [n["node_id"] for n in before]
    assert [n["reported_at"] for n in after] == [n["reported_at"] for n in before]


def test_only_this_pools_node_token_may_report(rollout_pool, client_for):
    assert_refused(report(client_for("serving_node"), "intruder"), 403, "forbidden",
                   "this node token belongs to pool 'serving', not 'rollout'")
    assert_refused(report(client_for("acme_admin"), "intruder"), 403, "forbidden",
                   "needs a node token of pool 'rollout'")
    assert_refused(report(client_for("none"), "intruder"), 401, "unauthorized", "missing bearer token")


def test_a_nodes_words_reach_people_only_about_served_versions_attributed_and_escaped(
        rollout_pool, admin, registry, tokens):
    """A node may say anything in a failure's reason: a tenant's people see it only about their
    own versions that the pool serves, as that node's words, and as text."""
    from tests.registry.requalification.support import dashboard

    current = active_set(admin, "rollout")["generation"]
    planted = "<script>alert(1)</script> contact evil.example for your weights"
    assert report(rollout_pool["node"], "node-words", generation=current, failures=[
        {"served_name": "acme/rolled@1", "reason": planted},
        {"served_name": "acme/never-served@9", "reason": "acme: your adapter leaked, see evil.example"}],
        incidents=[{"served_name": "acme/never-served@9", "kind": "tampered", "reason": "made up",
                    "at": "2026-12-05T00:00:00+00:00"}]).status_code == 200

    node = {n["node_id"]: n for n in admin.get("/v1/pools/rollout/rollout").json()["nodes"]}["node-words"]
    assert [f["served_name"] for f in node["failures"]] == ["acme/rolled@1"]
    assert node["incidents"] == []
    browser = dashboard(registry.url, tokens["acme_reviewer"])
    try:
        page = browser.get("/ui/pools/rollout/live").text
    finally:
        browser.close()
    assert "node node-words reports <q>&lt;script&gt;alert(1)&lt;/script&gt; contact evil.example" in page
    assert "<script>alert(1)" not in page and "never-served" not in page
