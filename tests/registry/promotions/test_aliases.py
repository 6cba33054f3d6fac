"""Aliases per adapter and pool: a canary carries a weight, promoting its version ends it, and a
rollback restores the version before, which stays loaded until every live node has moved on."""

from __future__ import annotations

import time

from tests.support.asserts import assert_refused
from tests.support.promotions import active_set, promote, served


def rollback(client, pool, adapter, alias="production"):
    return client.post(f"/v1/pools/{pool}/aliases/acme/{adapter}/{alias}/rollback",
                       json={"comment": "error rate doubled"})


def test_a_canary_weight_is_published_and_a_rollback_restores_the_earlier_version(
        promo_pools, make_ready, uploader, second_reviewer, client_for):
    pool, node = promo_pools["open"], client_for("global_admin")
    v1, v2 = make_ready("support-bot"), make_ready("support-bot")
    g0 = active_set(node, pool)["generation"]

    promote(uploader, second_reviewer, pool, v1)
    promote(uploader, second_reviewer, pool, v2, "canary", 10)

    canaried = active_set(node, pool)
    assert canaried["generation"] == g0 + 2
    assert served(canaried)["acme/support-bot@1"] == [("production", 90)]
    assert served(canaried)["acme/support-bot@2"] == [("canary", 10)]
    entry = next(e for e in canaried["entries"] if e["served_name"] == "acme/support-bot@2")
    assert entry["digest"] == v2["digest"] and entry["rank"] == 8 and entry["size_bytes"] == v2["size_bytes"]
    assert [f["name"] for f in entry["files"]] == [f["name"] for f in v2["files"]]
    assert all(f["url"].startswith("http") for f in entry["files"])

    graduated = promote(uploader, second_reviewer, pool, v2)  # the canary's version to production
    assert graduated["previous_id"] is not None
    after = served(active_set(node, pool))
    assert after["acme/support-bot@2"] == [("production", 100)]
    assert "acme/support-bot@1" not in after  # no live node: nothing to drain

    restored = rollback(second_reviewer, pool, "support-bot")

    assert restored.status_code == 200, restored.text
    assert restored.json()["kind"] == "rollback" and restored.json()["state"] == "active"
    assert served(active_set(node, pool))["acme/support-bot@1"] == [("production", 100)]
    assert "acme/support-bot@2" not in served(active_set(node, pool))
    history = {p["id"]: p["state"] for p in client_for("acme_admin").get(
        "/v1/promotions", params={"pool": pool, "tenant": "acme"}).json()["items"]
        if p["adapter"] == "support-bot"}
    assert sorted(history.values()) == ["active", "rolled_back", "superseded", "superseded"]
    assert_refused(rollback(second_reviewer, pool, "support-bot"), 409, "nothing_to_roll_back",
                   "has no earlier version to restore")


def test_a_first_canary_rolls_back_to_no_canary(promo_pools, make_ready, uploader, second_reviewer, admin):
    pool = promo_pools["open"]
    v1, v2 = make_ready("summarizer"), make_ready("summarizer")
    promote(uploader, second_reviewer, pool, v1)
    promote(uploader, second_reviewer, pool, v2, "canary", 25)
    assert served(active_set(admin, pool))["acme/summarizer@1"] == [("production", 75)]

    response = rollback(second_reviewer, pool, "summarizer", "canary")

    assert response.status_code == 200 and response.json()["state"] == "rolled_back"
    after = served(active_set(admin, pool))
    assert after["acme/summarizer@1"] == [("production", 100)] and "acme/summarizer@2" not in after


def test_rollback_needs_a_reviewer_and_an_alias(promo_pools, make_ready, uploader, second_reviewer, admin):
    pool = promo_pools["open"]
    promote(uploader, second_reviewer, pool, make_ready("lonely"))
    generation = active_set(admin, pool)["generation"]
    assert_refused(rollback(uploader, pool, "lonely"), 403, "forbidden", "role 'uploader' may not do this")
    assert_refused(rollback(second_reviewer, pool, "lonely", "canary"), 404, "alias_not_found",
                   "has no active 'canary' alias")
    assert active_set(admin, pool)["generation"] == generation


def test_a_rolled_back_version_stays_until_every_live_node_moved_on(
        promo_pools, make_ready, uploader, second_reviewer, client_for, tokens, registry):
    """promo-small's node reports; the replaced version drains, then leaves the set."""
    import httpx

    pool = promo_pools["open"]
    node_token = client_for("global_admin").post("/v1/tokens", json={
        "subject": "drain-node", "role": "node", "pool": pool, "instance_id": "node-a",
        "vllm_url": "http://10.0.0.5:8000"}).json()["token"]
    node = httpx.Client(base_url=registry.url, headers={"Authorization": f"Bearer {node_token}"})
    v1, v2 = make_ready("drainer"), make_ready("drainer")
    promote(uploader, second_reviewer, pool, v1)

    def report(generation):
        body = {"generation": generation, "loaded": [], "vllm_url": "http://10.0.0.5:8000",
                "limits": {"max_loras": 2, "max_cpu_loras": 64, "max_lora_rank": 16}}
        response = node.put(f"/v1/pools/{pool}/nodes/node-a/status", json=body)
        assert response.status_code == 200, response.text

    report(active_set(node, pool)["generation"])
    promote(uploader, second_reviewer, pool, v2)

    switched = active_set(node, pool)
    assert served(switched)["acme/drainer@1"] == []  # retiring: loaded, no alias
    assert next(e for e in switched["entries"] if e["served_name"] == "acme/drainer@1")["retiring"]
    time.sleep(0.6)  # the grace period; the node has not applied the switch yet
    report(switched["generation"] - 1)
    assert "acme/drainer@1" in served(active_set(node, pool))

    report(switched["generation"])

    drained = active_set(node, pool)
    assert drained["generation"] == switched["generation"] + 1
    assert "acme/drainer@1" not in served(drained)
    node.close()
