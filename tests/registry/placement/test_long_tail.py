"""A pool whose overflow is on_demand holds more approved versions than its nodes keep resident:
promotions pass while its cold tier holds the set, the most used versions are placed and the
rest left to load on demand, each node is told every version (its own to load ahead, the others
on demand), routers' traffic moves residency, the pool's setting changes only to what the set
fits, and the routers' windows give the pool's resident hit ratio and cold-load TTFTs.

The nodes are registry-only stand-ins (tests/support/nodes.py); real vLLMs load on demand through
the resolver in tests/serving/agent/test_on_demand.py."""

from __future__ import annotations

import uuid

import httpx
import pytest

from devkit.pipeline_steps import request_promotion
from devkit.services import wait_for
from tests.registry.requalification.support import dashboard
from tests.support.asserts import assert_refused
from tests.support.nodes import NodeFleet, RegistryStandIn, bound_address, issue_token

POOL = "tail"
LIMITS = {"max_loras": 1, "max_cpu_loras": 2, "max_lora_rank": 16}
VERSIONS = 6  # 4 resident slots on 2 nodes: 2 versions load on demand
COLD_TIER = 1 << 30
BUCKETS = 15  # the routers' TTFT buckets (registry/traffic_windows/schemas.py), and one above


def placement(client: httpx.Client) -> dict:
    response = client.get(f"/v1/pools/{POOL}/placement")
    assert response.status_code == 200, response.text
    return response.json()


def pool_row(client: httpx.Client) -> dict:
    return client.get(f"/v1/pools/{POOL}").json()


@pytest.fixture(scope="module")
def tail(admin, promo_pools, make_ready, uploader, second_reviewer, client_with):
    created = admin.post("/v1/pools", json={"name": POOL, "base_model": "promo-base", "dtype": "float32",
                                            "overflow": "on_demand", "cold_tier_bytes": COLD_TIER, **LIMITS})
    assert created.status_code == 201, created.text
    assert (created.json()["overflow"], created.json()["cold_tier_bytes"]) == ("on_demand", COLD_TIER)
    node_fleet = NodeFleet(admin, POOL)
    router = client_with(issue_token(admin, "tail-router", role="router", pool=POOL, instance_id="router-1"))
    nodes = {node_id: RegistryStandIn(node_fleet.client(node_id), POOL, node_id, LIMITS)
             for node_id in ("node-a", "node-b")}
    wait_for(lambda: len(placement(admin)["nodes"]) == 2, what="two live nodes")
    versions, gates = [], []
    for index in range(VERSIONS):
        version = make_ready(f"tail-{index}")
        promotion = request_promotion(uploader, POOL, version)
        assert promotion.status_code == 201, promotion.text
        gates.append(next(g for g in promotion.json()["gates"] if g["name"] == "capacity"))
        approved = second_reviewer.post(f"/v1/promotions/{promotion.json()['id']}/approve", json={"comment": "ok"})
        assert approved.status_code == 200, approved.text
        versions.append(version["served_name"])
    yield {"nodes": nodes, "node_fleet": node_fleet, "router": router, "versions": versions, "gates": gates}
    for node in nodes.values():
        node.stop()
    node_fleet.close()


def test_promotions_past_the_resident_slots_pass_while_the_cold_tier_holds_the_set(tail):
    last = tail["gates"][-1]
    assert last["passed"] is True
    assert last["message"].startswith("6 adapters: 4 resident in 4 slots (max_cpu_loras summed over 2 live nodes), "
                                      "2 loaded on demand; each node's cache needs ")
    assert last["message"].endswith(" of its 1.0 GiB cold tier")


def test_the_most_used_are_placed_and_each_node_is_told_the_rest_as_on_demand(tail, admin):
    body = wait_for(lambda: (b := placement(admin)) and len(b["unplaced"]) == 2 and b, what="the placement")
    cold = set(body["unplaced"])
    whole = tail["router"].get(f"/v1/pools/{POOL}/active-set").json()
    assert whole["overflow"] == "on_demand" and len(whole["entries"]) == VERSIONS
    assert {e["served_name"] for e in whole["entries"] if e["on_demand"]} == cold
    assert all(e["nodes"] == [] for e in whole["entries"] if e["on_demand"])
    for node_id, node in tail["nodes"].items():
        mine = {n["node_id"]: set(n["targets"]) for n in placement(admin)["nodes"]}[node_id]
        part = tail["node_fleet"].client(node_id).get(f"/v1/pools/{POOL}/active-set", params={"node": node_id}).json()
        assert part["node"] == node_id and len(part["entries"]) == VERSIONS
        assert {e["served_name"] for e in part["entries"] if not e["on_demand"]} == mine
        assert len(mine) <= LIMITS["max_cpu_loras"] and not mine & cold
        wait_for(lambda node=node, mine=mine: set(node.held) == mine, what=f"{node_id} holding its part")


def test_traffic_makes_a_cold_version_resident(tail, admin):
    cold = placement(admin)["unplaced"][0]
    rates = {name: 0.1 for name in tail["versions"]} | {cold: 30.0}
    sent = tail["router"].put(f"/v1/pools/{POOL}/routers/router-1/traffic", json={"requests_per_s": rates})
    assert sent.status_code == 204, sent.text
    body = wait_for(lambda: (b := placement(admin)) and cold not in b["unplaced"] and b, what="the hot version placed")
    assert len(body["unplaced"]) == 2 and all(len(n["targets"]) <= LIMITS["max_cpu_loras"] for n in body["nodes"])
    holders = [n["node_id"] for n in body["nodes"] if cold in n["targets"]]
    assert holders
    wait_for(lambda: all(cold in tail["nodes"][h].held for h in holders), what="the hot version loaded ahead")


def test_the_overflow_changes_only_to_what_the_set_fits(tail, admin):
    before, generation = pool_row(admin), admin.get(f"/v1/pools/{POOL}/rollout").json()["generation"]
    refused = admin.patch(f"/v1/pools/{POOL}", json={"overflow": "refuse"})
    assert_refused(refused, 409, "active_set_too_large",
                   "pool 'tail' serves 6 adapters, more than the 4 its nodes keep resident "
                   "(max_cpu_loras summed over 2 live nodes), so it cannot refuse overflow")
    too_small = admin.patch(f"/v1/pools/{POOL}", json={"cold_tier_bytes": 1000})
    assert_refused(too_small, 409, "active_set_too_large", "more than a cold tier of 1000 B holds")
    both = admin.patch(f"/v1/pools/{POOL}", json={"overflow": "refuse", "cold_tier_bytes": 5000})
    assert_refused(both, 422, "invalid_overflow", "cold_tier_bytes applies only to overflow on_demand")
    assert pool_row(admin) == before
    assert admin.get(f"/v1/pools/{POOL}/rollout").json()["generation"] == generation

    grown = admin.patch(f"/v1/pools/{POOL}", json={"cold_tier_bytes": 2 * COLD_TIER})
    assert grown.status_code == 200, grown.text
    assert grown.json()["cold_tier_bytes"] == 2 * COLD_TIER
    entry = admin.get("/v1/audit", params={"action": "pool.update", "subject": f"pool/{POOL}", "limit": 1}).json()["items"][0]
    assert entry["before"] == {"overflow": "on_demand", "cold_tier_bytes": COLD_TIER}
    assert entry["after"] == {"overflow": "on_demand", "cold_tier_bytes": 2 * COLD_TIER}


def test_with_no_live_node_nothing_past_the_slots_is_loaded_ahead(admin, promo_pools, make_ready, uploader,
                                                                  second_reviewer):
    """A placement made while no node is live puts every version everywhere. Read by nodes that
    come back (after the whole fleet was away, say), that would have each load the whole set."""
    pool = f"tail-empty-{uuid.uuid4().hex[:8]}"
    created = admin.post("/v1/pools", json={"name": pool, "base_model": "promo-base", "dtype": "float32",
                                            "overflow": "on_demand", "cold_tier_bytes": COLD_TIER, **LIMITS})
    assert created.status_code == 201, created.text
    for index in range(LIMITS["max_cpu_loras"] + 1):
        promotion = request_promotion(uploader, pool, make_ready(f"{pool}-{index}"))
        assert promotion.status_code == 201, promotion.text
        approved = second_reviewer.post(f"/v1/promotions/{promotion.json()['id']}/approve", json={"comment": "ok"})
        assert approved.status_code == 200, approved.text
    assert admin.get(f"/v1/pools/{pool}/placement").json()["mode"] == "everywhere"

    node = issue_token(admin, f"{pool}-node", role="node", pool=pool, instance_id=f"{pool}-node",
                       vllm_url=bound_address(f"{pool}-node"))
    part = httpx.get(f"{admin.base_url}/v1/pools/{pool}/active-set", params={"node": f"{pool}-node"},
                     headers={"Authorization": f"Bearer {node}"}).json()
    assert len(part["entries"]) == LIMITS["max_cpu_loras"] + 1
    assert [e["on_demand"] for e in part["entries"]] == [True] * (LIMITS["max_cpu_loras"] + 1)


def test_a_pool_that_refuses_overflow_cannot_load_on_demand_without_a_cold_tier(admin, promo_pools):
    pool = promo_pools["open"]
    before = admin.get(f"/v1/pools/{pool}").json()
    refused = admin.patch(f"/v1/pools/{pool}", json={"overflow": "on_demand"})
    assert_refused(refused, 422, "invalid_overflow", "overflow on_demand needs cold_tier_bytes")
    created = admin.post("/v1/pools", json={"name": "tail-bad", "base_model": "promo-base", "dtype": "float32",
                                            "overflow": "on_demand", **LIMITS})
    assert_refused(created, 422, "invalid_request", "overflow on_demand needs cold_tier_bytes")
    assert admin.get(f"/v1/pools/{pool}").json() == before
    assert admin.get("/v1/pools/tail-bad").status_code == 404


def window(served_name: str, *, answered: int, cold: int, cold_bucket: int = 9, warm_bucket: int = 4) -> dict:
    """`answered` requests of which `cold` took about 5 s to the first token and the rest 0.1 s."""
    ttft = [0] * BUCKETS
    ttft[warm_bucket] += answered - cold
    ttft[cold_bucket] += cold
    cold_ttft = [0] * BUCKETS
    cold_ttft[cold_bucket] = cold
    return {"served_name": served_name, "alias": "production", "requests": answered, "errors": {},
            "completion_tokens": answered, "busy_s": answered * 0.2, "ttft_buckets": ttft,
            "latency_buckets": ttft, "cold_requests": cold, "cold_ttft_buckets": cold_ttft}


def report(tail: dict, windows: list[dict]) -> httpx.Response:
    return tail["router"].put(f"/v1/pools/{POOL}/routers/router-1/traffic", json={
        "requests_per_s": {}, "report_id": str(uuid.uuid4()), "windows": windows})


def test_the_pools_residency_comes_from_the_routers_windows(tail, admin, client_for):
    first, second = tail["versions"][:2]
    sent = report(tail, [window(first, answered=90, cold=0), window(second, answered=10, cold=10)])
    assert sent.status_code == 204, sent.text
    body = admin.get(f"/v1/pools/{POOL}/residency").json()
    assert (body["overflow"], body["window_s"], body["answered"], body["cold_requests"]) == ("on_demand", 900, 100, 10)
    assert body["resident_hit_ratio"] == 0.9
    assert body["cold_loads_per_minute"] == round(10 / 15, 3)
    # Interpolated within the buckets: cold ones in (2.5 s, 5 s], warm ones in (0.05 s, 0.1 s].
    assert 2500 < body["cold_ttft_p50_ms"] <= body["cold_ttft_p99_ms"] <= 5000
    assert 50 < body["warm_ttft_p50_ms"] <= 100
    # acme's versions: another tenant counts none of them.
    theirs = client_for("globex_admin").get(f"/v1/pools/{POOL}/residency").json()
    assert (theirs["answered"], theirs["cold_requests"], theirs["resident_hit_ratio"]) == (0, 0, None)


@pytest.mark.parametrize("changes, message", [
    ({"cold_requests": 11}, "more cold requests than the 10 answered"),
    ({"cold_ttft_buckets": [0] * BUCKETS}, "cold_ttft_buckets must count each cold request once"),
    ({"cold_ttft_buckets": None}, "give cold_requests and cold_ttft_buckets together"),
    ({"cold_ttft_buckets": [5] + [0] * 8 + [5] + [0] * 5}, "a cold_ttft_buckets count exceeds its ttft_buckets count"),
])
def test_a_window_whose_cold_counts_do_not_add_up_is_refused_and_nothing_is_stored(tail, admin, changes, message):
    before = admin.get(f"/v1/pools/{POOL}/residency").json()
    bad = window(tail["versions"][2], answered=10, cold=10) | changes
    assert_refused(report(tail, [bad]), 422, "invalid_request", message)
    assert admin.get(f"/v1/pools/{POOL}/residency").json() == before


def test_the_pool_page_shows_the_long_tail_and_its_figures(tail, registry, tokens):
    page = dashboard(registry.url, tokens["global_admin"]).get(f"/ui/pools/{POOL}")
    assert page.status_code == 200, page.text[:300]
    text = " ".join(page.text.split())
    assert "Its long tail loads on demand" in text and "within a cold tier of 2.0 GiB on each node" in text
    assert "Long tail: the last 15 minutes" in text
    assert 'data-figure="resident_hit_ratio">90.0% of 100 answered requests' in text
    assert 'data-figure="cold_loads_per_minute">0.667' in text
    assert "Resident nowhere, loaded on demand at their first request" in text and "No node has room" not in text


def test_the_residency_span_is_bounded(tail, admin):
    assert_refused(admin.get(f"/v1/pools/{POOL}/residency", params={"window_s": 10}), 422, "invalid_request",
                   "window_s")
    assert_refused(admin.get(f"/v1/pools/{POOL}/residency", params={"window_s": 10**9}), 422, "invalid_request",
                   "window_s")
