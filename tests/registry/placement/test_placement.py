"""The registry places a pool's versions on its nodes once the set outgrows one node: each node
is told only its own part, joins and departures move only their share, moves are gradual, and
routers' traffic sizes the replicas.

The nodes here are stand-ins for agents that follow their part of the active set and report it
loaded at once: the test needs more nodes than real vLLMs fit on this machine. Two real vLLM
nodes are placed in tests/serving/test_placement_vllm.py."""

from __future__ import annotations

import math

import httpx
import pytest

from devkit.pipeline_steps import request_promotion
from devkit.services import wait_for
from registry.placement.rules import place
from tests.support.asserts import assert_refused
from tests.support.nodes import NodeFleet, RegistryStandIn, bound_address, issue_token

POOL = "placed"
CAPACITY = 3
LIMITS = {"max_loras": 1, "max_cpu_loras": CAPACITY, "max_lora_rank": 16}
ADAPTERS = 10


def placement(client: httpx.Client, pool: str = POOL) -> dict:
    response = client.get(f"/v1/pools/{pool}/placement")
    assert response.status_code == 200, response.text
    return response.json()


def targets(body: dict) -> dict[str, set[str]]:
    return {node["node_id"]: set(node["targets"]) for node in body["nodes"]}


@pytest.fixture(scope="module")
def fleet(admin, promo_pools, make_ready, uploader, second_reviewer, client_with):
    assert admin.post("/v1/pools", json={"name": POOL, "base_model": "promo-base", "dtype": "float32",
                                         **LIMITS}).status_code == 201
    node_fleet = NodeFleet(admin, POOL)
    router_client = client_with(issue_token(admin, "placed-router", role="router", pool=POOL,
                                            instance_id="router-1"))
    nodes = {node_id: RegistryStandIn(node_fleet.client(node_id), POOL, node_id, LIMITS)
             for node_id in ("node-a", "node-b", "node-c", "node-d", "node-e")}
    wait_for(lambda: len(placement(admin)["nodes"]) == 5, what="five live nodes")
    versions = []
    for index in range(ADAPTERS):  # 10 versions, 15 slots, 3 per node
        version = make_ready(f"placed-{index}")
        promotion = request_promotion(uploader, POOL, version)
        assert promotion.status_code == 201, promotion.text
        approved = second_reviewer.post(f"/v1/promotions/{promotion.json()['id']}/approve", json={"comment": "ok"})
        assert approved.status_code == 200, approved.text
        versions.append(version["served_name"])
    yield {"nodes": nodes, "node_fleet": node_fleet, "router_client": router_client,
           "versions": versions}
    for node in nodes.values():
        node.stop()
    node_fleet.close()


def test_each_node_is_told_only_its_part_and_no_node_exceeds_its_capacity(fleet, admin):
    body = placement(admin)
    assert body["mode"] == "spread" and body["unplaced"] == []
    assert sorted(a["served_name"] for a in body["adapters"]) == sorted(fleet["versions"])
    assert all(a["replicas"] >= 1 and a["nodes"] for a in body["adapters"])
    assert all(len(held) <= CAPACITY for held in targets(body).values())
    whole = fleet["router_client"].get(f"/v1/pools/{POOL}/active-set").json()
    assert len(whole["entries"]) == ADAPTERS and all(e["nodes"] for e in whole["entries"])
    for node_id, held in targets(body).items():
        part = fleet["node_fleet"].client(node_id).get(f"/v1/pools/{POOL}/active-set", params={"node": node_id}).json()
        assert part["node"] == node_id and part["generation"] == whole["generation"]
        assert {e["served_name"] for e in part["entries"]} == held
    # A node that has not reported yet is told nothing until it has been placed.
    newcomer = fleet["node_fleet"].client("node-z").get(f"/v1/pools/{POOL}/active-set", params={"node": "node-z"}).json()
    assert newcomer["entries"] == []
    rollout = admin.get(f"/v1/pools/{POOL}/rollout").json()
    wait_for(lambda: admin.get(f"/v1/pools/{POOL}/rollout").json()["nodes_converged"] == 5, what="convergence")
    assert rollout["nodes_total"] == 5


def test_a_joining_node_takes_only_its_share_and_the_old_holder_drains_after(fleet, admin):
    before = targets(placement(admin))
    fleet["nodes"]["node-f"] = newcomer = RegistryStandIn(fleet["node_fleet"].client("node-f"), POOL, "node-f", LIMITS)
    newcomer.loads = False  # it downloads slowly: the old holders must keep serving meanwhile
    # Its part, not only its listing: under load its first placement can still list it empty.
    after = targets(wait_for(lambda: (b := placement(admin)) and targets(b).get("node-f") and b,
                             what="node-f placed"))
    moved = {name for node, held in after.items() for name in held - before.get(node, set())}
    assert moved and moved <= after["node-f"], (before, after)
    # What the rules predict from the previous placement, and nothing else.
    expected = place(fleet["versions"], {node: CAPACITY for node in after}, {},
                     _as_placement(before))
    assert {node: set(held) for node, held in expected.targets.items()} == after
    old_holders = {name: node for node, held in before.items() for name in held & moved}
    for name, node in old_holders.items():
        part = fleet["node_fleet"].client(node).get(f"/v1/pools/{POOL}/active-set", params={"node": node}).json()
        assert name in {e["served_name"] for e in part["entries"]}, "unloaded before the new node had it"
    newcomer.loads = True
    for name, node in old_holders.items():
        wait_for(lambda: name not in {e["served_name"] for e in fleet["node_fleet"].client(node).get(
            f"/v1/pools/{POOL}/active-set", params={"node": node}).json()["entries"]}, what=f"{node} to drain {name}")


def test_a_departing_node_moves_only_what_it_held(fleet, admin):
    before = targets(placement(admin))
    leaving = fleet["nodes"].pop("node-b")
    leaving.stop()  # it stops reporting; the registry counts it gone after NODE_STALE_AFTER_S
    gone = wait_for(lambda: (b := placement(admin)) and "node-b" not in targets(b) and b,
                    what="node-b's part moved", timeout_s=30)
    after = targets(gone)
    moved = {name for node, held in after.items() for name in held - before.get(node, set())}
    assert moved == before["node-b"]
    assert all(len(held) <= CAPACITY for held in after.values())
    assert {name for held in after.values() for name in held} == set(fleet["versions"])
    # Should it come back (say, after a network split), it keeps what it last held until it is
    # placed again, instead of unloading everything.
    returning = fleet["node_fleet"].client("node-b").get(f"/v1/pools/{POOL}/active-set", params={"node": "node-b"}).json()
    assert {e["served_name"] for e in returning["entries"]} == before["node-b"]


def test_routers_traffic_gives_a_busy_version_more_replicas(fleet, admin):
    hot = fleet["versions"][0]
    rates = {name: 0.5 for name in fleet["versions"]} | {hot: 20.0}  # 20 of 24.5 requests/s
    share = 20.0 / sum(rates.values())
    sent = fleet["router_client"].put(f"/v1/pools/{POOL}/routers/router-1/traffic", json={"requests_per_s": rates})
    assert sent.status_code == 204, sent.text
    nodes = len(targets(placement(admin)))
    body = wait_for(lambda: (b := placement(admin)) and len(_adapter(b, hot)["nodes"]) > 1 and b, what="replicas")
    assert 1 < _adapter(body, hot)["replicas"] <= math.ceil(share * nodes)  # ⌈share × N⌉ at most
    assert all(_adapter(body, name)["replicas"] == 1 for name in fleet["versions"][1:])
    assert abs(_adapter(body, hot)["traffic_share"] - share) < 1e-3
    assert all(len(held) <= CAPACITY for held in targets(body).values())


def test_bad_traffic_reports_and_node_ids_are_refused_and_change_nothing(fleet, admin, client_for):
    before = placement(admin)
    url = f"/v1/pools/{POOL}/routers/router-1/traffic"
    bad_name = fleet["router_client"].put(url, json={"requests_per_s": {"not a served name": 1.0}})
    assert_refused(bad_name, 422, "invalid_request", "'not a served name' is not a served name (tenant/name@N)")
    negative = fleet["router_client"].put(url, json={"requests_per_s": {fleet["versions"][1]: -1}})
    assert_refused(negative, 422, "invalid_request", f"the rate of {fleet['versions'][1]} must be between 0 and 1000000")
    as_node = fleet["node_fleet"].client("node-a").put(url, json={"requests_per_s": {}})
    assert_refused(as_node, 403, "forbidden", "role 'node' may not do this; it needs a router token of pool 'placed'")
    bad_router_id = fleet["router_client"].put(f"/v1/pools/{POOL}/routers/Bad..Id/traffic", json={"requests_per_s": {}})
    assert bad_router_id.status_code == 422
    bad_node = fleet["node_fleet"].client("node-a").get(f"/v1/pools/{POOL}/active-set", params={"node": "../etc"})
    assert bad_node.status_code == 422
    by_other_tenant = client_for("globex_admin").get(f"/v1/pools/{POOL}/placement").json()
    assert by_other_tenant["adapters"] == [] and all(n["targets"] == [] for n in by_other_tenant["nodes"])
    after = placement(admin)
    assert [(a["served_name"], a["traffic_share"]) for a in after["adapters"]] == \
        [(a["served_name"], a["traffic_share"]) for a in before["adapters"]]


def test_while_the_set_fits_every_node_is_told_the_whole_set(admin, promo_pools, client_with):
    pool = promo_pools["open"]  # max_cpu_loras 64: every node holds everything
    node = client_with(issue_token(admin, "open-node", role="node", pool=pool, instance_id="any-node",
                                     vllm_url=bound_address("any-node")))
    whole = node.get(f"/v1/pools/{pool}/active-set").json()
    part = node.get(f"/v1/pools/{pool}/active-set", params={"node": "any-node"}).json()
    assert part["node"] is None and part["entries"] == whole["entries"]
    assert all(entry["nodes"] is None for entry in part["entries"])
    assert placement(admin, pool)["mode"] == "everywhere"


def _adapter(body: dict, served_name: str) -> dict:
    return next(a for a in body["adapters"] if a["served_name"] == served_name)


def _as_placement(assignment: dict[str, set[str]]):
    from registry.placement.rules import SPREAD, Placement

    names = {name for held in assignment.values() for name in held}
    return Placement(SPREAD, {node: frozenset(held) for node, held in assignment.items()},
                     {name: sum(name in held for held in assignment.values()) for name in names}, {})
