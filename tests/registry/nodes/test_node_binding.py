"""A node or router token speaks for one node or router id of one pool: a leaked token cannot
overwrite another node's address, claim its adapters, read its part of the set, or report
another router's traffic."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from registry.tables import ApiToken

from tests.support.asserts import assert_refused
from tests.support.nodes import NodeFleet
from tests.support.promotions import active_set

POOL = "bound"
LIMITS = {"max_loras": 2, "max_cpu_loras": 8, "max_lora_rank": 16}


@pytest.fixture(scope="module")
def fleet(admin, promo_pools):
    assert admin.post("/v1/pools", json={"name": POOL, "base_model": "promo-base", **LIMITS}).status_code == 201
    nodes = NodeFleet(admin, POOL)
    routers = NodeFleet(admin, POOL, role="router")
    yield {"nodes": nodes, "routers": routers}
    nodes.close()
    routers.close()


def status(node_id: str, vllm_url: str, generation: int = 0) -> dict:
    return {"generation": generation, "loaded": [], "failures": [], "vllm_url": vllm_url, "limits": LIMITS}


def token_count(engine) -> int:
    with Session(engine) as session:
        return session.scalar(select(func.count()).select_from(ApiToken))


def stored_nodes(admin) -> dict:
    return {n["node_id"]: (n["vllm_url"], n["reported_at"])
            for n in admin.get(f"/v1/pools/{POOL}/rollout").json()["nodes"]}


def test_a_node_token_cannot_report_for_another_node(fleet, admin):
    node_a, node_b = fleet["nodes"].client("node-a"), fleet["nodes"].client("node-b")
    assert node_b.put(f"/v1/pools/{POOL}/nodes/node-b/status",
                      json=status("node-b", "http://10.0.0.2:8000")).status_code == 200
    before = stored_nodes(admin)

    hijack = node_a.put(f"/v1/pools/{POOL}/nodes/node-b/status", json=status("node-b", "http://10.6.6.6:8000"))

    assert_refused(hijack, 403, "forbidden", "this node token is bound to node 'node-a', not 'node-b'")
    assert "--instance-id node-b" in hijack.json()["error"]["hint"]
    assert stored_nodes(admin) == before
    assert admin.get("/readyz").status_code == 200


def test_a_node_token_reads_only_its_own_part_of_the_set(fleet, admin):
    node_a = fleet["nodes"].client("node-a")
    own = node_a.get(f"/v1/pools/{POOL}/active-set")
    assert own.status_code == 200 and own.json()["generation"] == active_set(admin, POOL)["generation"]

    other = node_a.get(f"/v1/pools/{POOL}/active-set", params={"node": "node-b"})

    assert_refused(other, 403, "forbidden", "this node token is bound to node 'node-a', not 'node-b'")


def test_a_router_token_cannot_report_another_routers_traffic(fleet, admin):
    router_1 = fleet["routers"].client("router-1")
    before = admin.get(f"/v1/pools/{POOL}/placement").json()

    forged = router_1.put(f"/v1/pools/{POOL}/routers/router-2/traffic", json={"requests_per_s": {}})

    assert_refused(forged, 403, "forbidden", "this router token is bound to router 'router-1', not 'router-2'")
    assert admin.get(f"/v1/pools/{POOL}/placement").json() == before
    assert admin.get("/readyz").status_code == 200
    assert router_1.put(f"/v1/pools/{POOL}/routers/router-1/traffic",
                        json={"requests_per_s": {}}).status_code == 204


@pytest.mark.parametrize(("scope", "message"), [
    ({"role": "node", "pool": POOL}, "a node token needs the node id it speaks for"),
    ({"role": "router", "pool": POOL}, "a router token needs the router id it speaks for"),
    ({"role": "reviewer", "tenant": "acme", "instance_id": "node-a"},
     "only node and router tokens are bound to an instance id"),
    ({"role": "node", "pool": POOL, "instance_id": "Node A"}, "instance_id"),
])
def test_unbound_or_misbound_tokens_are_not_issued(admin, fleet, engine, scope, message):
    before = token_count(engine)
    response = admin.post("/v1/tokens", json={"subject": "unbound", **scope})
    assert response.status_code == 422, response.text
    assert message in response.json()["error"]["message"]
    assert token_count(engine) == before


def test_a_global_admin_may_still_report_for_any_node(fleet, admin):
    response = admin.put(f"/v1/pools/{POOL}/nodes/node-c/status", json=status("node-c", "http://10.0.0.3:8000"))
    assert response.status_code == 200, response.text


def test_a_node_token_cannot_read_other_nodes_addresses(fleet, admin):
    """The rollout and placement hold every node's vLLM address: the router's business, not a
    node's."""
    node_a = fleet["nodes"].client("node-a")
    for path in (f"/v1/pools/{POOL}/rollout", f"/v1/pools/{POOL}/placement"):
        assert_refused(node_a.get(path), 403, "forbidden", "role 'node' may not do this")
    assert fleet["routers"].client("router-1").get(f"/v1/pools/{POOL}/rollout").status_code == 200
