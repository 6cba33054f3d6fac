"""Every endpoint against no token, each role, and another tenant's tokens."""

from __future__ import annotations

import hashlib
import itertools
import json

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from registry.auth import tokens as token_service
from registry.tables import ApiToken

from tests.conftest import PRINCIPALS

ALL = ["none", *PRINCIPALS]
counter = itertools.count()


def expect(default: int, **overrides: int) -> dict[str, int]:
    """Expected status per principal: 401 without a token, `default` unless overridden. An app
    key is refused everywhere but /v1/whoami; a router token gets what a node token gets, unless
    overridden."""
    expected = {"none": 401, **{p: default for p in PRINCIPALS}, "acme_app": 403, **overrides}
    if "serving_router" not in overrides:
        expected["serving_router"] = expected["serving_node"]
    return expected


READERS = expect(403, global_admin=200, acme_admin=200, acme_uploader=200, acme_reviewer=200)
GLOBAL_ADMIN_ONLY = expect(403, global_admin=201)
ANY_TOKEN = expect(200)


@pytest.fixture(scope="module")
def world(uploader, base_model, make_adapter, tiny_base):
    """One acme adapter version to read, and the inputs for writes."""
    folder = make_adapter(seed=41)
    files = [(n, (folder / n).read_bytes()) for n in ("adapter_config.json", "adapter_model.safetensors")]
    assert uploader.post("/v1/adapters/acme/matrix/versions",
                         files=[("file", f) for f in files]).status_code == 201
    config = json.loads((tiny_base / "config.json").read_text())
    return {"files": files, "config": config}


def unique(prefix: str) -> str:
    return f"{prefix}-{next(counter)}"


ENDPOINTS = [
    ("GET /v1/whoami", lambda w: ("GET", "/v1/whoami", {}), expect(200, acme_app=200)),
    ("GET /v1/base-models", lambda w: ("GET", "/v1/base-models", {}), ANY_TOKEN),
    ("GET /v1/base-models/{name}", lambda w: ("GET", "/v1/base-models/tiny-llama", {}), ANY_TOKEN),
    ("POST /v1/base-models", lambda w: ("POST", "/v1/base-models", {
        "json": {"name": unique("base"), "config": w["config"]}}), GLOBAL_ADMIN_ONLY),
    ("GET /v1/pools", lambda w: ("GET", "/v1/pools", {}), ANY_TOKEN),
    ("POST /v1/pools", lambda w: ("POST", "/v1/pools", {"json": {
        "name": unique("pool"), "base_model": "tiny-llama", "max_loras": 2, "max_cpu_loras": 4,
        "max_lora_rank": 16}}), GLOBAL_ADMIN_ONLY),
    ("GET /v1/adapters", lambda w: ("GET", "/v1/adapters", {"params": {"tenant": "acme"}}), READERS),
    ("GET /v1/adapters/{t}/{n}", lambda w: ("GET", "/v1/adapters/acme/matrix", {}), READERS),
    ("GET /v1/adapters/{t}/{n}/versions", lambda w: ("GET", "/v1/adapters/acme/matrix/versions", {}),
     READERS),
    ("GET /v1/adapters/{t}/{n}/versions/{v}",
     lambda w: ("GET", "/v1/adapters/acme/matrix/versions/1", {}), READERS),
    ("GET /v1/adapters/{t}/{n}/versions/{v}/download",
     lambda w: ("GET", "/v1/adapters/acme/matrix/versions/1/download", {}), READERS),
    ("POST /v1/adapters/{t}/{n}/versions",
     lambda w: ("POST", f"/v1/adapters/acme/{unique('upload')}/versions",
                {"files": [("file", f) for f in w["files"]]}),
     expect(403, global_admin=201, acme_admin=201, acme_uploader=201)),
    ("GET /v1/audit", lambda w: ("GET", "/v1/audit", {}),
     expect(403, global_admin=200, acme_admin=200, globex_admin=200)),
    ("POST /v1/tokens", lambda w: ("POST", "/v1/tokens", {"json": {
        "subject": unique("person"), "role": "reviewer", "tenant": "acme"}}),
     expect(403, global_admin=201, acme_admin=201)),
    ("POST /v1/pools/{p}/promotions", lambda w: ("POST", "/v1/pools/serving/promotions", {"json": {
        "adapter": "acme/matrix", "version": 1}}),  # passes auth, then its gates block it
     expect(403, global_admin=422, acme_admin=422, acme_uploader=422, acme_reviewer=422)),
    ("GET /v1/promotions", lambda w: ("GET", "/v1/promotions", {}), expect(200, serving_node=403)),
    ("GET /v1/promotions/{id}", lambda w: ("GET", "/v1/promotions/999999", {}), expect(404)),
    ("POST /v1/promotions/{id}/approve", lambda w: ("POST", "/v1/promotions/999999/approve",
                                                    {"json": {"comment": "ok"}}), expect(404)),
    ("POST /v1/promotions/{id}/reject", lambda w: ("POST", "/v1/promotions/999999/reject",
                                                   {"json": {"comment": "no"}}), expect(404)),
    ("GET /v1/pools/{p}/aliases", lambda w: ("GET", "/v1/pools/serving/aliases", {}),
     expect(200, serving_node=403)),
    ("POST /v1/pools/{p}/aliases/{t}/{n}/{a}/rollback",
     lambda w: ("POST", "/v1/pools/serving/aliases/acme/matrix/production/rollback",
                {"json": {"comment": "undo"}}),  # passes auth, then finds no alias
     expect(403, global_admin=404, acme_admin=404, acme_reviewer=404)),
    ("GET /v1/pools/{p}/active-set", lambda w: ("GET", "/v1/pools/serving/active-set", {}),
     expect(403, global_admin=200, serving_node=200)),
    ("PUT /v1/pools/{p}/nodes/{n}/status",
     lambda w: ("PUT", "/v1/pools/serving/nodes/matrix-node/status", {"json": {
         "generation": 0, "loaded": [], "vllm_url": "http://10.1.2.3:8000",
         "limits": {"max_loras": 2, "max_cpu_loras": 4, "max_lora_rank": 16}}}),
     expect(403, global_admin=200, serving_node=200, serving_router=403)),
    ("GET /v1/pools/{p}/sizing", lambda w: ("GET", "/v1/pools/serving/sizing", {}),
     expect(200, serving_node=403)),
    ("GET /v1/pools/{p}/rollout", lambda w: ("GET", "/v1/pools/serving/rollout", {}), expect(200)),
    ("POST /v1/webhooks", lambda w: ("POST", "/v1/webhooks", {"json": {
        # Loopback port 9 refuses at once: its deliveries fail fast and hold up no other test.
        "url": "http://127.0.0.1:9/loraplane", "tenant": "acme"}}),
     expect(403, global_admin=201, acme_admin=201)),
    ("GET /v1/webhooks", lambda w: ("GET", "/v1/webhooks", {}),
     expect(403, global_admin=200, acme_admin=200, globex_admin=200)),
    ("GET /v1/audit/verify", lambda w: ("GET", "/v1/audit/verify", {}), expect(403, global_admin=200)),
    ("GET /metrics", lambda w: ("GET", "/metrics", {}), expect(403, global_admin=200)),
    ("GET /healthz", lambda w: ("GET", "/healthz", {}), {p: 200 for p in ALL}),
    ("GET /readyz", lambda w: ("GET", "/readyz", {}), {p: 200 for p in ALL}),
]


@pytest.mark.parametrize(("principal", "endpoint"),
                         [(p, e) for e in ENDPOINTS for p in ALL],
                         ids=[f"{e[0]} as {p}" for e in ENDPOINTS for p in ALL])
def test_authorization(client_for, world, principal, endpoint):
    _, make_request, expected = endpoint
    method, path, kwargs = make_request(world)

    response = client_for(principal).request(method, path, **kwargs)

    assert response.status_code == expected[principal], response.text
    if response.status_code in (401, 403):
        assert response.json()["error"]["code"] in ("unauthorized", "forbidden")


def test_a_tenant_scoped_reader_only_sees_its_own_tenant(client_for, world):
    listing = client_for("acme_reviewer").get("/v1/adapters").json()["items"]
    assert listing and {a["tenant"] for a in listing} == {"acme"}
    assert client_for("globex_uploader").get("/v1/adapters").json()["items"] == []


def test_an_invalid_or_revoked_token_is_refused(registry, client_for, engine, world):
    wrong = httpx.get(registry.url + "/v1/whoami", headers={"Authorization": "Bearer lpt_wrong"})
    assert wrong.status_code == 401
    assert wrong.json()["error"]["message"] == "invalid or revoked token"
    assert wrong.headers["www-authenticate"] == "Bearer"
    created = client_for("global_admin").post(
        "/v1/tokens", json={"subject": "short-lived", "role": "uploader", "tenant": "acme"}).json()
    headers = {"Authorization": f"Bearer {created['token']}"}
    assert httpx.get(registry.url + "/v1/whoami", headers=headers).status_code == 200

    with Session(engine) as session, session.begin():
        token_service.revoke_token(session, created["id"], actor="tests")

    revoked = httpx.get(registry.url + "/v1/whoami", headers=headers)
    assert revoked.status_code == 401
    assert revoked.json()["error"]["message"] == "invalid or revoked token"


def test_tokens_are_stored_only_as_hashes(engine, tokens):
    with Session(engine) as session:
        stored = set(session.scalars(select(ApiToken.token_hash)))
    assert not stored & set(tokens.values())
    assert {hashlib.sha256(t.encode()).hexdigest() for t in tokens.values()} <= stored
