"""Every operation of the OpenAPI document against no token, each role, own and other tenant,
own and other pool, and own and other node or router id."""

from __future__ import annotations

import hashlib
import itertools
import json

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from registry.tables import ApiToken
from registry.tokens import issuing as token_service

from tests.conftest import PRINCIPALS
from devkit.units_of_work import unit_of_work

ALL = ["none", *PRINCIPALS]
counter = itertools.count()


def expect(default: int, **overrides: int) -> dict[str, int]:
    """Expected status per principal: 401 without a token, `default` unless overridden. An app
    key is refused everywhere but /v1/whoami, a metrics token everywhere but /metrics and
    /v1/whoami; a router token gets what a node token gets, unless
    overridden."""
    expected = {"none": 401, **{p: default for p in PRINCIPALS}, "acme_app": 403, "scraper": 403,
                **overrides}
    if "serving_router" not in overrides:
        expected["serving_router"] = expected["serving_node"]
    return expected


READERS = expect(403, global_admin=200, acme_admin=200, acme_uploader=200, acme_reviewer=200)
PEOPLE = READERS | {"globex_admin": 200, "globex_uploader": 200}
GLOBAL_ADMIN_ONLY = expect(403, global_admin=201)
ANY_TOKEN = expect(200)
TENANT_ADMINS = expect(403, global_admin=200, acme_admin=200)
TENANT_UPLOADERS_404 = expect(403, global_admin=404, acme_admin=404, acme_uploader=404)
NOT_FOUND_FOR_PEOPLE = expect(403, global_admin=404, acme_admin=404, acme_uploader=404,
                              acme_reviewer=404, globex_admin=404, globex_uploader=404)


@pytest.fixture(scope="module")
def world(uploader, base_model, make_adapter, tiny_base):
    """One acme adapter version to read, and the inputs for writes."""
    folder = make_adapter(seed=41)
    files = [(n, (folder / n).read_bytes()) for n in ("adapter_config.json", "adapter_model.safetensors")]
    assert uploader.post("/v1/adapters/acme/matrix/versions",
                         files=[("file", f) for f in files]).status_code == 201
    config = json.loads((tiny_base / "config.json").read_text())
    return {"files": files, "config": config}


def signing_key_pem() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1()).public_key()
    return key.public_bytes(serialization.Encoding.PEM,
                            serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def unique(prefix: str) -> str:
    return f"{prefix}-{next(counter)}"


NODE_STATUS = {"generation": 0, "loaded": [], "vllm_url": "http://10.1.2.3:8000",
               "limits": {"max_loras": 2, "max_cpu_loras": 4, "max_lora_rank": 16}}
BLOB = "blobs/sha256/00/" + "0" * 64
# Every operation of the OpenAPI document, keyed exactly as it names it: a new endpoint without
# a rule here fails test_every_endpoint_has_a_rule. Some keys have several cases (own and other
# pool, node or router). Each case: (request, expected status per principal).
ENDPOINTS = {
    "GET /.well-known/loraplane/trust-bundle.json": [
        (lambda w: ("GET", "/.well-known/loraplane/trust-bundle.json", {}), {p: 200 for p in ALL})],
    "GET /v1/adapters/{tenant}/{name}/versions/{number}/attestations": [
        (lambda w: ("GET", "/v1/adapters/acme/matrix/versions/1/attestations", {}), READERS)],
    # A real rotation for the global admin, with the usual overlap: every key stays trusted.
    "POST /v1/attestation-keys/rotate": [(lambda w: ("POST", "/v1/attestation-keys/rotate", {
        "json": {"overlap_s": 7 * 86400}}), expect(403, global_admin=200))],
    "POST /v1/tenants": [(lambda w: ("POST", "/v1/tenants", {"json": {"name": unique("matrix-tenant")}}),
                          GLOBAL_ADMIN_ONLY)],
    "GET /v1/tenants": [(lambda w: ("GET", "/v1/tenants", {}),
                         expect(403, global_admin=200, acme_admin=200, globex_admin=200))],
    "GET /v1/tenants/{tenant}": [(lambda w: ("GET", "/v1/tenants/acme", {}), TENANT_ADMINS)],
    # An empty change: acme is never disabled or renamed here.
    "PATCH /v1/tenants/{tenant}": [(lambda w: ("PATCH", "/v1/tenants/acme", {"json": {}}),
                                    expect(403, global_admin=200))],
    "GET /v1/tenants/{tenant}/signing-keys": [
        (lambda w: ("GET", "/v1/tenants/acme/signing-keys", {}), TENANT_ADMINS)],
    "POST /v1/tenants/{tenant}/signing-keys": [
        (lambda w: ("POST", "/v1/tenants/acme/signing-keys", {"json": {
            "name": unique("key"), "public_key_pem": signing_key_pem()}}),
         expect(403, global_admin=201, acme_admin=201))],
    "POST /v1/tenants/{tenant}/signing-keys/{name}/revoke": [
        (lambda w: ("POST", "/v1/tenants/acme/signing-keys/no-such-key/revoke", {}),
         expect(403, global_admin=404, acme_admin=404))],
    "GET /v1/tenants/{tenant}/signing-policy": [
        (lambda w: ("GET", "/v1/tenants/acme/signing-policy", {}), TENANT_ADMINS)],
    "PUT /v1/tenants/{tenant}/signing-policy": [
        (lambda w: ("PUT", "/v1/tenants/acme/signing-policy",
                    {"json": {"require_signed_uploads": False}}), TENANT_ADMINS)],
    "PATCH /v1/pools/{name}": [(lambda w: ("PATCH", "/v1/pools/serving", {
        "json": {"requalify_policy": "keep_serving"}}), expect(403, global_admin=200))],
    # The serving pool serves nothing: declaring an engine there marks nothing.
    "POST /v1/pools/{pool}/engines": [(lambda w: ("POST", "/v1/pools/serving/engines", {
        "json": {"vllm_version": "0.32.0"}}), expect(403, global_admin=200))],
    "GET /v1/pools/{pool}/requalifications": [(lambda w: ("GET", "/v1/pools/serving/requalifications", {}),
                                               expect(200, serving_node=403, serving_router=200,
                                                      other_pool_node=403))],
    "POST /v1/attestations/backfill": [(lambda w: ("POST", "/v1/attestations/backfill", {}),
                                         expect(403, global_admin=200))],
    "GET /v1/whoami": [(lambda w: ("GET", "/v1/whoami", {}), expect(200, acme_app=200, scraper=200))],
    # Single sign-on: whether it is on is public; a login code proves itself (none is valid here).
    "GET /v1/sso": [(lambda w: ("GET", "/v1/sso", {}), {p: 200 for p in ALL})],
    "POST /v1/sso/token": [(lambda w: ("POST", "/v1/sso/token", {"json": {
        "exchange_code": "c" * 43, "code_verifier": "v" * 43}}), {p: 401 for p in ALL})],
    # People only; the token to link is no one's, so a person's call gets as far as refusing it.
    "POST /v1/identities/link": [(lambda w: ("POST", "/v1/identities/link", {"json": {"token": "lpt_wrong"}}),
                                  expect(401, serving_node=403, other_pool_node=403))],
    "POST /v1/tokens": [(lambda w: ("POST", "/v1/tokens", {"json": {
        "subject": unique("person"), "role": "reviewer", "tenant": "acme"}}),
        expect(403, global_admin=201, acme_admin=201))],
    "GET /v1/tokens": [(lambda w: ("GET", "/v1/tokens", {}), expect(200)),
                       (lambda w: ("GET", "/v1/tokens", {"params": {"tenant": "acme"}}),
                        expect(200, globex_admin=403))],
    "POST /v1/tokens/{token_id}/revoke": [
        (lambda w: ("POST", "/v1/tokens/999999/revoke", {}), expect(404))],
    "GET /v1/base-models": [(lambda w: ("GET", "/v1/base-models", {}), ANY_TOKEN)],
    "GET /v1/base-models/{name}": [(lambda w: ("GET", "/v1/base-models/tiny-llama", {}), ANY_TOKEN)],
    "POST /v1/base-models": [(lambda w: ("POST", "/v1/base-models", {
        "json": {"name": unique("base"), "config": w["config"]}}), GLOBAL_ADMIN_ONLY)],
    "POST /v1/base-models/{name}/aliases": [(lambda w: ("POST", "/v1/base-models/tiny-llama/aliases", {
        "json": {"alias": unique("matrix-alias")}}), GLOBAL_ADMIN_ONLY)],
    "DELETE /v1/base-models/{name}/aliases/{alias}": [
        (lambda w: ("DELETE", "/v1/base-models/tiny-llama/aliases/never-added", {}), expect(403, global_admin=404))],
    "GET /v1/pools": [(lambda w: ("GET", "/v1/pools", {}), ANY_TOKEN)],
    "GET /v1/pools/{name}": [(lambda w: ("GET", "/v1/pools/serving", {}), ANY_TOKEN)],
    "POST /v1/pools": [(lambda w: ("POST", "/v1/pools", {"json": {
        "name": unique("pool"), "base_model": "tiny-llama", "max_loras": 2, "max_cpu_loras": 4,
        "max_lora_rank": 16}}), GLOBAL_ADMIN_ONLY)],
    "POST /v1/eval-suites": [(lambda w: ("POST", "/v1/eval-suites", {"json": {
        "name": unique("suite"), "base_model": "tiny-llama",
        "examples": [{"prompt": "1 =>", "reference": "one"}], "metrics": {"exact_match": {"min": 0.5}}}}),
        GLOBAL_ADMIN_ONLY),
        # A tenant's suite: its admins and uploaders create it.
        (lambda w: ("POST", "/v1/eval-suites", {"json": {
            "name": unique("suite"), "tenant": "acme", "base_model": "tiny-llama",
            "examples": [{"prompt": "1 =>", "reference": "one"}], "metrics": {"exact_match": {"min": 0.5}}}}),
         expect(403, global_admin=201, acme_admin=201, acme_uploader=201))],
    "GET /v1/eval-suites": [(lambda w: ("GET", "/v1/eval-suites", {}), PEOPLE)],
    "GET /v1/eval-suites/{name}": [(lambda w: ("GET", "/v1/eval-suites/no-such-suite", {}),
                                    NOT_FOUND_FOR_PEOPLE)],
    "GET /v1/eval-suites/{tenant}/{name}": [(lambda w: ("GET", "/v1/eval-suites/acme/no-such-suite", {}),
                                             expect(403, global_admin=404, acme_admin=404, acme_uploader=404,
                                                    acme_reviewer=404))],
    "GET /v1/adapters": [(lambda w: ("GET", "/v1/adapters", {"params": {"tenant": "acme"}}), READERS)],
    "GET /v1/adapters/{tenant}/{name}": [(lambda w: ("GET", "/v1/adapters/acme/matrix", {}), READERS)],
    # Retire and delete: the tenant's admins and uploaders; an adapter or version that does not
    # exist shows they got past the role check (nothing here is changed).
    "POST /v1/adapters/{tenant}/{name}/retire": [
        (lambda w: ("POST", "/v1/adapters/acme/no-such-adapter/retire", {}), TENANT_UPLOADERS_404)],
    "DELETE /v1/adapters/{tenant}/{name}": [
        (lambda w: ("DELETE", "/v1/adapters/acme/no-such-adapter", {}), TENANT_UPLOADERS_404)],
    "POST /v1/adapters/{tenant}/{name}/versions/{number}/retire": [
        (lambda w: ("POST", "/v1/adapters/acme/matrix/versions/999/retire", {}), TENANT_UPLOADERS_404)],
    "DELETE /v1/adapters/{tenant}/{name}/versions/{number}": [
        (lambda w: ("DELETE", "/v1/adapters/acme/matrix/versions/999", {}), TENANT_UPLOADERS_404)],
    "GET /v1/adapters/{tenant}/{name}/evaluation-policy": [
        (lambda w: ("GET", "/v1/adapters/acme/matrix/evaluation-policy", {}), READERS)],
    # The tenant's admins and uploaders set its adapters' policies; an empty one changes nothing.
    "PUT /v1/adapters/{tenant}/{name}/evaluation-policy": [
        (lambda w: ("PUT", "/v1/adapters/acme/matrix/evaluation-policy", {"json": {"required_suites": []}}),
         expect(403, global_admin=200, acme_admin=200, acme_uploader=200))],
    # A weakening waits for the tenant's reviewers and admins; the matrix's adapter has none
    # waiting, so those who may act are told so.
    "POST /v1/adapters/{tenant}/{name}/evaluation-policy/approve": [
        (lambda w: ("POST", "/v1/adapters/acme/matrix/evaluation-policy/approve", {"json": {"sha256": "0" * 64}}),
         expect(403, global_admin=409, acme_admin=409, acme_reviewer=409))],
    "DELETE /v1/adapters/{tenant}/{name}/evaluation-policy/proposed": [
        (lambda w: ("DELETE", "/v1/adapters/acme/matrix/evaluation-policy/proposed", {}),
         expect(403, global_admin=409, acme_admin=409, acme_uploader=409, acme_reviewer=409))],
    "GET /v1/adapters/{tenant}/{name}/versions": [
        (lambda w: ("GET", "/v1/adapters/acme/matrix/versions", {}), READERS)],
    "GET /v1/adapters/{tenant}/{name}/versions/{number}": [
        (lambda w: ("GET", "/v1/adapters/acme/matrix/versions/1", {}), READERS)],
    # The matrix's version has no model card: a reader is told so, anyone else is refused first.
    "GET /v1/adapters/{tenant}/{name}/versions/{number}/model-card": [
        (lambda w: ("GET", "/v1/adapters/acme/matrix/versions/1/model-card", {}),
         expect(403, global_admin=404, acme_admin=404, acme_uploader=404, acme_reviewer=404))],
    "GET /v1/adapters/{tenant}/{name}/versions/{number}/download": [
        (lambda w: ("GET", "/v1/adapters/acme/matrix/versions/1/download", {}), READERS)],
    "POST /v1/adapters/{tenant}/{name}/versions": [
        (lambda w: ("POST", f"/v1/adapters/acme/{unique('upload')}/versions",
                    {"files": [("file", f) for f in w["files"]]}),
         expect(403, global_admin=201, acme_admin=201, acme_uploader=201))],
    "POST /v1/adapters/{tenant}/{name}/versions/{number}/evaluations": [
        (lambda w: ("POST", "/v1/adapters/acme/matrix/versions/1/evaluations",
                    {"json": {"suite": "no-such-suite"}}),
         expect(403, global_admin=404, acme_admin=404, acme_uploader=404, acme_reviewer=404))],
    "GET /v1/adapters/{tenant}/{name}/versions/{number}/evaluations": [
        (lambda w: ("GET", "/v1/adapters/acme/matrix/versions/1/evaluations", {}), READERS)],
    "GET /v1/evaluations/{evaluation_id}": [
        (lambda w: ("GET", "/v1/evaluations/999999", {}), NOT_FOUND_FOR_PEOPLE)],
    "GET /v1/promotions/{promotion_id}/canary": [
        (lambda w: ("GET", "/v1/promotions/999999/canary", {}), NOT_FOUND_FOR_PEOPLE)],
    "POST /v1/promotions/{promotion_id}/canary/pause": [
        (lambda w: ("POST", "/v1/promotions/999999/canary/pause", {}),
         expect(403, global_admin=404, acme_admin=404, acme_reviewer=404, globex_admin=404))],
    "POST /v1/promotions/{promotion_id}/canary/resume": [
        (lambda w: ("POST", "/v1/promotions/999999/canary/resume", {}),
         expect(403, global_admin=404, acme_admin=404, acme_reviewer=404, globex_admin=404))],
    "GET /v1/audit": [(lambda w: ("GET", "/v1/audit", {}),
                       expect(403, global_admin=200, acme_admin=200, globex_admin=200))],
    "GET /v1/audit/verify": [(lambda w: ("GET", "/v1/audit/verify", {}), expect(403, global_admin=200))],
    "POST /v1/pools/{pool}/promotions": [(lambda w: ("POST", "/v1/pools/serving/promotions", {"json": {
        "adapter": "acme/matrix", "version": 1}}),  # passes auth, then its gates block it
        expect(403, global_admin=422, acme_admin=422, acme_uploader=422, acme_reviewer=422))],
    "GET /v1/promotions": [(lambda w: ("GET", "/v1/promotions", {}),
                            expect(200, serving_node=403, other_pool_node=403))],
    "GET /v1/promotions/{promotion_id}": [(lambda w: ("GET", "/v1/promotions/999999", {}), expect(404))],
    "POST /v1/promotions/{promotion_id}/approve": [
        (lambda w: ("POST", "/v1/promotions/999999/approve", {"json": {"comment": "ok"}}), expect(404))],
    "POST /v1/promotions/{promotion_id}/reject": [
        (lambda w: ("POST", "/v1/promotions/999999/reject", {"json": {"comment": "no"}}), expect(404))],
    "GET /v1/pools/{pool}/aliases": [(lambda w: ("GET", "/v1/pools/serving/aliases", {}),
                                      expect(200, serving_node=403, other_pool_node=403))],
    "POST /v1/pools/{pool}/aliases/{tenant}/{name}/{alias}/rollback": [
        (lambda w: ("POST", "/v1/pools/serving/aliases/acme/matrix/production/rollback",
                    {"json": {"comment": "undo"}}),  # passes auth, then finds no alias
         expect(403, global_admin=404, acme_admin=404, acme_reviewer=404))],
    "GET /v1/pools/{pool}/active-set": [
        (lambda w: ("GET", "/v1/pools/serving/active-set", {}),
         expect(403, global_admin=200, serving_node=200, serving_router=200)),
        (lambda w: ("GET", "/v1/pools/serving/active-set", {"params": {"node": "serving-node"}}),
         expect(403, global_admin=200, serving_node=200, serving_router=200)),
        (lambda w: ("GET", "/v1/pools/serving/active-set", {"params": {"node": "another-node"}}),
         expect(403, global_admin=200, serving_router=200))],
    "PUT /v1/pools/{pool}/nodes/{node_id}/status": [
        (lambda w: ("PUT", "/v1/pools/serving/nodes/serving-node/status", {"json": NODE_STATUS}),
         expect(403, global_admin=200, serving_node=200, serving_router=403)),
        (lambda w: ("PUT", "/v1/pools/serving/nodes/another-node/status", {"json": NODE_STATUS}),
         expect(403, global_admin=200, serving_router=403))],
    "PUT /v1/pools/{pool}/nodes/{node_id}/address": [
        (lambda w: ("PUT", "/v1/pools/serving/nodes/serving-node/address",
                    {"json": {"vllm_url": "http://serving-node.nodes.invalid:8000"}}),
         expect(403, global_admin=200))],
    "GET /v1/pools/{pool}/rollout": [(lambda w: ("GET", "/v1/pools/serving/rollout", {}),
                                      expect(200, serving_node=403, serving_router=200,
                                             other_pool_node=403))],
    "GET /v1/pools/{pool}/placement": [(lambda w: ("GET", "/v1/pools/serving/placement", {}),
                                        expect(200, serving_node=403, serving_router=200,
                                               other_pool_node=403))],
    "GET /v1/pools/{pool}/residency": [(lambda w: ("GET", "/v1/pools/serving/residency", {}),
                                        expect(200, serving_node=403, serving_router=200,
                                               other_pool_node=403))],
    "PUT /v1/pools/{pool}/routers/{router_id}/traffic": [
        (lambda w: ("PUT", "/v1/pools/serving/routers/serving-router/traffic",
                    {"json": {"requests_per_s": {}}}),
         expect(403, global_admin=204, serving_router=204)),
        (lambda w: ("PUT", "/v1/pools/serving/routers/another-router/traffic",
                    {"json": {"requests_per_s": {}}}),
         expect(403, global_admin=204))],
    "GET /v1/pools/{pool}/sizing": [(lambda w: ("GET", "/v1/pools/serving/sizing", {}),
                                     expect(200, serving_node=403, other_pool_node=403))],
    "POST /v1/webhooks": [(lambda w: ("POST", "/v1/webhooks", {"json": {
        # Loopback port 9 refuses at once: its deliveries fail fast and hold up no other test.
        "url": "http://127.0.0.1:9/loraplane", "tenant": "acme"}}),
        expect(403, global_admin=201, acme_admin=201))],
    "GET /v1/webhooks": [(lambda w: ("GET", "/v1/webhooks", {}),
                          expect(403, global_admin=200, acme_admin=200, globex_admin=200))],
    "GET /v1/webhooks/{webhook_id}/deliveries": [
        (lambda w: ("GET", "/v1/webhooks/999999/deliveries", {}),
         expect(403, global_admin=404, acme_admin=404, globex_admin=404))],
    "DELETE /v1/webhooks/{webhook_id}": [
        (lambda w: ("DELETE", "/v1/webhooks/999999", {}),
         expect(403, global_admin=404, acme_admin=404, globex_admin=404))],
    # The signed link is the credential, as with S3: no bearer token opens it, none is needed.
    "GET /v1/artifacts/{key}": [
        (lambda w: ("GET", f"/v1/artifacts/{BLOB}", {"params": {"expires": 1, "signature": "0" * 64}}),
         {p: 404 for p in ALL})],
    "GET /metrics": [(lambda w: ("GET", "/metrics", {}), expect(403, global_admin=200, scraper=200))],
    "GET /healthz": [(lambda w: ("GET", "/healthz", {}), {p: 200 for p in ALL})],
    "GET /readyz": [(lambda w: ("GET", "/readyz", {}), {p: 200 for p in ALL})],
}
CASES = [(key, index, case) for key, cases in ENDPOINTS.items() for index, case in enumerate(cases)]


def test_every_endpoint_has_a_rule(registry):
    document = httpx.get(registry.url + "/openapi.json").json()
    operations = {f"{method.upper()} {path}" for path, item in document["paths"].items() for method in item}
    assert operations - set(ENDPOINTS) == set(), "endpoints without an authorization rule"
    assert set(ENDPOINTS) - operations == set(), "rules for endpoints that no longer exist"


@pytest.mark.parametrize(("principal", "case"), [(p, c) for c in CASES for p in ALL],
                         ids=[f"{c[0]} #{c[1]} as {p}" for c in CASES for p in ALL])
def test_authorization(client_for, world, principal, case):
    _, _, (make_request, expected) = case
    method, path, kwargs = make_request(world)

    response = client_for(principal).request(method, path, **kwargs)

    assert response.status_code == expected[principal], response.text
    if response.status_code in (401, 403):
        assert response.json()["error"]["code"] in ("unauthorized", "forbidden")


def test_a_tenant_scoped_reader_only_sees_its_own_tenant(client_for, world):
    listing = client_for("acme_reviewer").get("/v1/adapters").json()["items"]
    assert listing and {a["tenant"] for a in listing} == {"acme"}
    # Other tests may have given globex adapters of its own; never acme's.
    assert {a["tenant"] for a in client_for("globex_uploader").get("/v1/adapters").json()["items"]} <= {"globex"}


def test_an_invalid_or_revoked_token_is_refused(registry, client_for, engine, world):
    wrong = httpx.get(registry.url + "/v1/whoami", headers={"Authorization": "Bearer lpt_wrong"})
    assert wrong.status_code == 401
    assert wrong.json()["error"]["message"] == "invalid or revoked token"
    assert wrong.headers["www-authenticate"] == "Bearer"
    created = client_for("global_admin").post(
        "/v1/tokens", json={"subject": "short-lived", "role": "uploader", "tenant": "acme"}).json()
    headers = {"Authorization": f"Bearer {created['token']}"}
    assert httpx.get(registry.url + "/v1/whoami", headers=headers).status_code == 200

    with unit_of_work(engine) as session:
        token_service.revoke_token(session, created["id"], actor="tests")

    revoked = httpx.get(registry.url + "/v1/whoami", headers=headers)
    assert revoked.status_code == 401
    assert revoked.json()["error"]["message"] == "invalid or revoked token"


def test_tokens_are_stored_only_as_keyed_hashes(engine, tokens):
    from registry.auth.tokens import hash_token

    with Session(engine) as session:
        stored = set(session.scalars(select(ApiToken.token_hash)))
    assert not stored & set(tokens.values())
    assert {hash_token(t) for t in tokens.values()} <= stored
    assert not {hashlib.sha256(t.encode()).hexdigest() for t in tokens.values()} & stored
