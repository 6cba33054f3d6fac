"""Four-eyes approval, rejection with a comment, and concurrent requests for one alias."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx

from devkit.pipeline_steps import request_promotion
from devkit.services import wait_for
from tests.support.asserts import assert_refused
from tests.support.promotions import active_set, served


def identity(client: httpx.Client) -> int:
    return client.get("/v1/whoami").json()["identity_id"]


def decide(client: httpx.Client, promotion_id: int, verdict: str, comment: str = "checked the evals"):
    return client.post(f"/v1/promotions/{promotion_id}/{verdict}", json={"comment": comment})


def test_the_uploader_and_the_requester_may_not_approve(promo_pools, make_ready, client_for,
                                                        second_reviewer, admin):
    pool = promo_pools["open"]
    version = make_ready("four-eyes", uploader="acme_admin")
    reviewer = client_for("acme_reviewer")
    promotion = request_promotion(reviewer, pool, version).json()
    assert promotion.get("state") == "awaiting_approval", promotion

    as_uploader = decide(client_for("acme_admin"), promotion["id"], "approve")
    as_requester = decide(reviewer, promotion["id"], "approve")
    as_plain_uploader = decide(client_for("acme_uploader"), promotion["id"], "approve")

    admin_id, reviewer_id = identity(client_for("acme_admin")), identity(reviewer)
    assert_refused(as_uploader, 403, "four_eyes",
                   f"acme_admin (identity {admin_id}) uploaded this version and may not approve it")
    assert_refused(as_requester, 403, "four_eyes",
                   f"acme_reviewer (identity {reviewer_id}) requested this promotion and may not approve it")
    assert_refused(as_plain_uploader, 403, "forbidden", "role 'uploader' may not do this")
    assert "another reviewer" in as_uploader.json()["error"]["hint"]
    shown = client_for("acme_admin").get(f"/v1/promotions/{promotion['id']}").json()
    assert shown["state"] == "awaiting_approval"
    assert shown["can_approve"] == {"allowed": False,
                                    "reason": f"acme_admin (identity {admin_id}) uploaded this "
                                              "version and may not approve it"}
    assert "acme/four-eyes@1" not in served(active_set(admin, pool))

    approved = decide(second_reviewer, promotion["id"], "approve", "evals and parity are fine")

    assert approved.status_code == 200, approved.text
    body = approved.json()
    assert body["state"] == "active" and body["decision_comment"] == "evals and parity are fine"
    assert {g["name"] for g in body["gates"]} >= {"base_model", "rank", "parity", "capacity", "four_eyes"}
    assert served(active_set(admin, pool))["acme/four-eyes@1"] == [("production", 100)]
    assert_refused(decide(second_reviewer, promotion["id"], "approve"), 409, "invalid_transition",
                   "is active and cannot become approved")


def test_a_rejection_needs_a_comment_and_changes_nothing_served(promo_pools, make_ready, uploader,
                                                               second_reviewer, admin):
    pool = promo_pools["open"]
    promotion = request_promotion(uploader, pool, make_ready("rejected")).json()
    generation = active_set(admin, pool)["generation"]

    assert_refused(decide(second_reviewer, promotion["id"], "reject", "  "), 422, "invalid_request",
                   "a comment must say why, not be blank")
    assert_refused(decide(second_reviewer, promotion["id"], "reject", "\x00 hidden"), 422,
                   "invalid_request", "comment")
    rejected = decide(second_reviewer, promotion["id"], "reject", "exact match regressed on long inputs")

    assert rejected.status_code == 200
    assert rejected.json()["state"] == "rejected"
    assert rejected.json()["decision_comment"] == "exact match regressed on long inputs"
    assert active_set(admin, pool)["generation"] == generation
    assert_refused(decide(second_reviewer, promotion["id"], "approve"), 409, "invalid_transition",
                   "is rejected and cannot become approved")
    events = admin.get("/v1/audit", params={"action": "promotion.rejected"}).json()["items"]
    assert events[-1]["after"]["comment"] == "exact match regressed on long inputs"


def test_another_tenant_cannot_see_or_decide(promo_pools, make_ready, uploader, client_for):
    promotion = request_promotion(uploader, promo_pools["open"], make_ready("private")).json()
    globex = client_for("globex_admin")
    for response in (globex.get(f"/v1/promotions/{promotion['id']}"),
                     decide(globex, promotion["id"], "approve"), decide(globex, promotion["id"], "reject")):
        assert_refused(response, 404, "promotion_not_found", f"promotion {promotion['id']} does not exist")
    assert promotion["id"] not in {p["id"] for p in globex.get("/v1/promotions").json()["items"]}


def test_two_concurrent_promotions_of_one_alias_one_wins(promo_pools, make_ready, registry,
                                                        second_registry, tokens, client_for):
    """Each request goes to a different registry process, at the same moment."""
    pool = promo_pools["open"]
    first, second = make_ready("contested"), make_ready("contested")
    clients = [httpx.Client(base_url=url, headers={"Authorization": f"Bearer {tokens['acme_uploader']}"},
                            timeout=60) for url in (registry.url, second_registry.url)]
    with ThreadPoolExecutor(2) as pool_executor:
        responses = list(pool_executor.map(lambda pair: request_promotion(pair[0], pool, pair[1]),
                                           zip(clients, (first, second))))
    for client in clients:
        client.close()

    statuses = sorted(r.status_code for r in responses)
    assert statuses == [201, 409], [r.text for r in responses]
    loser = next(r for r in responses if r.status_code == 409)
    assert_refused(loser, 409, "alias_busy", "'production' for this adapter in pool 'promo-open' "
                                             "is already awaiting approval")
    open_requests = client_for("acme_admin").get(
        "/v1/promotions", params={"pool": pool, "state": "awaiting_approval"}).json()["items"]
    assert sum(p["adapter"] == "contested" for p in open_requests) == 1


def test_two_concurrent_approvals_activate_once(promo_pools, make_ready, uploader, registry,
                                                second_registry, admin):
    pool = promo_pools["open"]
    promotion = request_promotion(uploader, pool, make_ready("double-approve")).json()
    before = active_set(admin, pool)["generation"]
    clients = [httpx.Client(base_url=url, headers=dict(admin.headers), timeout=60)
               for url in (registry.url, second_registry.url)]
    with ThreadPoolExecutor(2) as executor:
        responses = list(executor.map(lambda c: decide(c, promotion["id"], "approve"), clients))
    for client in clients:
        client.close()

    assert sorted(r.status_code for r in responses) == [200, 409], [r.text for r in responses]
    # When the other process won, this one's in-memory active set hears of it by notification,
    # a moment after the commit: wait for the change, then check it happened once.
    wait_for(lambda: active_set(admin, pool)["generation"] > before, timeout_s=10, what="a new generation")
    assert active_set(admin, pool)["generation"] == before + 1
