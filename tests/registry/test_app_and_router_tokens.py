"""App keys (tenant-scoped, with an SLO tier, only for the router) and router tokens (one pool,
read-only): how they are made, what they may do, and bad requests that store nothing."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from registry.tables import ApiToken
from tests.support.asserts import assert_refused


def token_count(engine) -> int:
    with Session(engine) as session:
        return session.scalar(select(func.count()).select_from(ApiToken))


def test_an_app_key_is_interactive_unless_made_batch(admin, client_for, registry):
    import httpx

    who = client_for("acme_app").get("/v1/whoami").json()
    assert {k: v for k, v in who.items() if k not in ("identity_id", "token_id")} == {
        "subject": "acme_app", "role": "app", "tenant": "acme", "pool": None, "instance_id": None,
        "tier": "interactive"}
    created = admin.post("/v1/tokens", json={"subject": "nightly-jobs", "role": "app",
                                             "tenant": "acme", "tier": "batch"})
    assert created.status_code == 201 and created.json()["tier"] == "batch"
    who = httpx.get(registry.url + "/v1/whoami", headers={"Authorization": f"Bearer {created.json()['token']}"})
    assert who.json()["tier"] == "batch" and who.json()["role"] == "app"


@pytest.mark.parametrize(("body", "status", "code", "message"), [
    ({"role": "app"}, 422, "invalid", "token needs a tenant"),
    ({"role": "uploader", "tenant": "acme", "tier": "batch"}, 422, "invalid_token_scope",
     "only app keys have an SLO tier"),
    ({"role": "app", "tenant": "acme", "tier": "urgent"}, 422, "invalid_request", "tier"),
    ({"role": "router"}, 422, "invalid_token_scope", "a router token needs a pool and no tenant"),
    ({"role": "router", "pool": "serving", "tenant": "acme"}, 422, "invalid_token_scope",
     "a router token needs a pool and no tenant"),
    ({"role": "app", "tenant": "acme", "pool": "serving"}, 422, "invalid_token_scope",
     "only node and router tokens belong to a pool"),
])
def test_bad_token_requests_are_refused_and_store_nothing(admin, engine, body, status, code, message):
    before = token_count(engine)
    assert_refused(admin.post("/v1/tokens", json={"subject": "someone", **body}), status, code, message)
    assert token_count(engine) == before


def test_an_app_key_may_call_nothing_else_in_the_registry(client_for):
    app = client_for("acme_app")
    for method, path in (("GET", "/v1/adapters"), ("GET", "/v1/pools"), ("POST", "/v1/tokens")):
        assert_refused(app.request(method, path), 403, "forbidden",
                       "app keys may only call the router (and /v1/whoami)")
    assert_refused(app.get("/v1/pools/serving/active-set"), 403, "forbidden",
                   "role 'app' may not do this; it needs a node or router token of pool 'serving'")


def test_a_router_token_reads_its_pool_but_reports_nothing(client_for, admin):
    router = client_for("serving_router")
    assert router.get("/v1/pools/serving/active-set").status_code == 200
    assert router.get("/v1/pools/serving/rollout").status_code == 200
    status = {"generation": 0, "loaded": [], "vllm_url": "http://10.9.9.9:8000",
              "limits": {"max_loras": 2, "max_cpu_loras": 4, "max_lora_rank": 16}}
    def reports() -> list[tuple]:  # what is stored, without the age that grows as we look
        return [(n["node_id"], n["reported_at"], n["vllm_url"])
                for n in admin.get("/v1/pools/serving/rollout").json()["nodes"]]

    before = reports()
    assert_refused(router.put("/v1/pools/serving/nodes/impostor/status", json=status), 403, "forbidden",
                   "role 'router' may not do this; it needs a node token of pool 'serving'")
    assert reports() == before


def test_a_router_reads_names_and_weights_but_never_a_file(admin, promo_pools, make_ready, uploader,
                                                          second_reviewer, registry):
    """Presigned file URLs would let one router token download every tenant's weights."""
    import httpx

    from devkit.pipeline_steps import request_promotion
    from tests.support.nodes import issue_token

    pool = "router-view"
    assert admin.post("/v1/pools", json={"name": pool, "base_model": "promo-base", "max_loras": 2,
                                         "max_cpu_loras": 8, "max_lora_rank": 16}).status_code == 201
    version = make_ready("seen-by-routers")
    promotion = request_promotion(uploader, pool, version).json()
    assert second_reviewer.post(f"/v1/promotions/{promotion['id']}/approve", json={"comment": "ok"}).status_code == 200
    tokens = {role: issue_token(admin, f"view-{role}", role=role, pool=pool, instance_id=f"view-{role}",
                                **({"vllm_url": "http://view-node.nodes.invalid:8000"} if role == "node" else {}))
              for role in ("node", "router")}

    def bodies(role: str) -> list[dict]:  # the first answer is the endpoint's, the second the fast path's
        headers = {"Authorization": f"Bearer {tokens[role]}"}
        return [httpx.get(f"{registry.url}/v1/pools/{pool}/active-set", headers=headers).json() for _ in range(2)]

    for body in bodies("router"):
        [entry] = body["entries"]
        assert entry["served_name"] == "acme/seen-by-routers@1" and entry["digest"] == version["digest"]
        assert entry["aliases"][0]["alias"] == "production" and entry["aliases"][0]["weight"] == 100
        assert "files" not in entry and "attestation" not in entry and "url" not in str(body).lower()
    for body in bodies("node"):
        [entry] = body["entries"]
        assert entry["files"] and all(f["url"].startswith("http") for f in entry["files"])
        assert entry["attestation"] is not None
