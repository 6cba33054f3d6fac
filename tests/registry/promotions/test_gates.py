"""Each gate blocks a promotion with its own message and hint, and nothing is stored."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from devkit.pipeline_steps import request_promotion
from registry.tables import Pool, Promotion
from tests.support.asserts import assert_refused


def stored(engine, pool: str) -> tuple[int, int]:
    with Session(engine) as session:
        promotions = session.scalar(select(func.count()).select_from(Promotion))
        generation = session.scalar(select(Pool.generation).where(Pool.name == pool))
    return promotions, generation


def approve(client, promotion_id: int):
    response = client.post(f"/v1/promotions/{promotion_id}/approve", json={"comment": "looks good"})
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture(scope="module")
def small_pool_full(promo_pools, make_ready, uploader, second_reviewer):
    """promo-small holds one adapter, and has one."""
    version = make_ready("fills-small")
    created = request_promotion(uploader, promo_pools["small"], version)
    assert created.status_code == 201, created.text
    approve(second_reviewer, created.json()["id"])


def scenario(name, promo_pools, make_ready, make_adapter, uploader, small_pool_full):
    """(pool, version, alias, weight) that only the named gate blocks."""
    if name == "base_model":
        folder = make_adapter(seed=77)  # built for tiny-llama, not promo-base
        from devkit.pipeline_steps import upload_dir
        return promo_pools["open"], upload_dir(uploader, "acme/other-base", folder), "production", None
    if name == "rank":
        return promo_pools["gated"], make_ready("too-wide", r=16), "production", None
    if name == "required_suites":
        return promo_pools["gated"], make_ready("fails-suite", passed=False), "production", None
    if name == "parity":
        return promo_pools["open"], make_ready("drifts", parity=False), "production", None
    if name == "capacity":
        return promo_pools["small"], make_ready("one-too-many"), "production", None
    if name == "alias":
        return promo_pools["open"], make_ready("canary-first"), "canary", 10
    raise AssertionError(name)


@pytest.mark.parametrize(("gate", "message", "hint"), [
    ("base_model", "is for base model 'tiny-llama', pool 'promo-open' serves 'promo-base'",
     "pool of its own base model"),
    ("rank", "rank 16 exceeds pool 'promo-gated''s max_lora_rank 8", "Retrain with r ≤ 8"),
    ("required_suites", "promo-suite (failed: exact_match)", "loraplane eval run"),
    ("parity", "parity failed (promo-suite: max logprob diff 0.5)", "merged weights"),
    ("capacity", "would hold 2 adapters, more than the 1", "raise the pool's max_cpu_loras"),
    ("alias", "a canary needs a production version", "Promote a version to 'production' first"),
])
def test_each_gate_blocks_with_its_message(gate, message, hint, engine, base_model, promo_pools, make_ready,
                                           make_adapter, uploader, small_pool_full):
    pool, version, alias, weight = scenario(gate, promo_pools, make_ready, make_adapter, uploader,
                                            small_pool_full)
    before = stored(engine, pool)

    response = request_promotion(uploader, pool, version, alias, weight)

    assert_refused(response, 422, "gate_blocked", f"[{gate}]")
    error = response.json()["error"]
    assert message in error["message"]
    assert hint in error["hint"]
    blocked = {d["name"] for d in error["details"]}
    # A version for another base has no evaluation on this pool's base either.
    assert blocked == ({gate, "parity"} if gate == "base_model" else {gate})
    assert stored(engine, pool) == before


def test_an_unevaluated_version_is_blocked_by_suites_and_parity(engine, promo_pools, make_ready, uploader):
    version = make_ready("not-yet", evaluate=False)
    before = stored(engine, promo_pools["gated"])

    response = request_promotion(uploader, promo_pools["gated"], version)

    assert_refused(response, 422, "gate_blocked", "promo-suite (still queued)")
    assert {d["name"] for d in response.json()["error"]["details"]} == {"required_suites", "parity"}
    assert stored(engine, promo_pools["gated"]) == before


@pytest.mark.parametrize(("body", "message"), [
    ({"alias": "canary"}, "a canary needs a weight"),
    ({"alias": "production", "weight": 10}, "only the 'canary' alias carries a weight"),
    ({"alias": "canary", "weight": 100}, "less than or equal to 99"),
    ({"alias": "Prod"}, "alias"),
    ({"version": 0}, "greater than or equal to 1"),
])
def test_bad_promotion_requests_are_refused(engine, promo_pools, make_ready, uploader, body, message):
    version = make_ready("bad-body")
    request = {"adapter": "acme/bad-body", "version": version["number"], **body}
    before = stored(engine, promo_pools["open"])

    response = uploader.post(f"/v1/pools/{promo_pools['open']}/promotions", json=request)

    assert_refused(response, 422, "invalid_request", message)
    assert stored(engine, promo_pools["open"]) == before


def test_unknown_pool_version_and_other_tenants(engine, promo_pools, make_ready, uploader, client_for):
    version = make_ready("scoped")
    before = stored(engine, promo_pools["open"])
    assert_refused(request_promotion(uploader, "no-such-pool", version), 404, "pool_not_found", "'no-such-pool'")
    assert_refused(request_promotion(uploader, promo_pools["open"], {**version, "number": 99}), 404,
                   "version_not_found", "has no version 99")
    assert_refused(request_promotion(client_for("globex_uploader"), promo_pools["open"], version), 403,
                   "forbidden", "belongs to tenant 'globex'")
    assert_refused(request_promotion(client_for("serving_node"), promo_pools["open"], version), 403,
                   "forbidden", "role 'node' may not do this")
    assert stored(engine, promo_pools["open"]) == before


def test_capacity_counts_every_live_node(admin, make_ready, uploader, second_reviewer):
    """The router keeps each adapter on few nodes, so two live nodes of one slot hold two adapters."""
    from tests.registry.conftest import PROMO_BASE

    pool = "promo-two-nodes"
    body = {"name": pool, "base_model": PROMO_BASE, "dtype": "float32", "max_loras": 1,
            "max_cpu_loras": 1, "max_lora_rank": 16}
    assert admin.post("/v1/pools", json=body).status_code == 201
    first = request_promotion(uploader, pool, make_ready("node-slot-1"))
    approve(second_reviewer, first.json()["id"])
    waiting = make_ready("node-slot-2")
    assert_refused(request_promotion(uploader, pool, waiting), 422, "gate_blocked",
                   "more than the 1 that pool 'promo-two-nodes' keeps resident")

    for node in ("slot-a", "slot-b"):
        status = {"generation": 0, "loaded": [], "vllm_url": f"http://10.0.0.{len(node)}:8000",
                  "limits": {"max_loras": 1, "max_cpu_loras": 4, "max_lora_rank": 16}}
        assert admin.put(f"/v1/pools/{pool}/nodes/{node}/status", json=status).status_code == 200
    second = request_promotion(uploader, pool, waiting)

    assert second.status_code == 201, second.text
    capacity = next(g for g in second.json()["gates"] if g["name"] == "capacity")
    assert capacity["passed"]
    assert capacity["message"] == "2 of 2 adapter slots (max_cpu_loras summed over 2 live nodes)"
