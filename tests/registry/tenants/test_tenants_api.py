"""Tenants as first-class records: global admins create, rename, disable and enable them and set
their own quotas; a tenant's admins read their own. A disabled tenant's tokens are refused
everywhere until it is enabled again, a tenant's own quota replaces the deployment default,
every change is audited, and every refusal changes nothing.

Each test makes tenants of its own (the session's acme and globex are never disabled)."""

from __future__ import annotations

import secrets

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from devkit.pipeline_steps import create_suite, evaluations_of, upload_dir
from devkit.units_of_work import unit_of_work
from registry.auth.principal import Role
from registry.tables import ApiToken, AuditEvent, EvalSuite, Tenant
from registry.tokens import issuing as token_service
from tests.support.asserts import assert_refused

SLUG_FIXED = ("body: a tenant's name never changes: it is the slug in served names "
              "(tenant/adapter@N), signed active sets, attestations and audit subjects. Send "
              "display_name to rename the tenant")


def fresh(prefix: str = "tn") -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


def state(engine) -> dict:
    """Everything a refused tenant change could have written."""
    with Session(engine) as session:
        return {"tenants": session.execute(select(
                    Tenant.id, Tenant.name, Tenant.display_name, Tenant.disabled_at,
                    Tenant.max_waiting_evaluations, Tenant.max_suites).order_by(Tenant.id)).all(),
                "tokens": session.scalar(select(func.count()).select_from(ApiToken)),
                "audit_events": session.scalar(select(func.count()).select_from(AuditEvent))}


def events(admin: httpx.Client, name: str) -> list[dict]:
    items = admin.get("/v1/audit", params={"subject": f"tenant/{name}", "limit": 200}).json()["items"]
    return sorted(items, key=lambda e: e["id"])


def all_tenants(client: httpx.Client) -> list[dict]:
    items, cursor = [], None
    while True:
        page = client.get("/v1/tenants", params={"limit": 2, **({"cursor": cursor} if cursor else {})})
        assert page.status_code == 200, page.text
        items += page.json()["items"]
        cursor = page.json()["next_cursor"]
        if not cursor:
            return items


def token_for(engine, tenant: str, role: Role = Role.ADMIN) -> str:
    with unit_of_work(engine) as session:
        _, plain = token_service.create_token(session, subject=f"{tenant}-{role}", role=role,
                                              tenant=tenant, actor="tests")
    return plain


@pytest.fixture
def client_of(registry):
    clients = []

    def make(token: str) -> httpx.Client:
        client = httpx.Client(base_url=registry.url, timeout=60,
                              headers={"Authorization": f"Bearer {token}"})
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def test_a_global_admin_creates_lists_shows_renames_and_sets_quotas(admin):
    name = fresh()
    created = admin.post("/v1/tenants", json={"name": name, "display_name": "Team Zero",
                                              "max_waiting_evaluations": 7})

    assert created.status_code == 201, created.text
    body = created.json()
    assert body["name"] == name and body["display_name"] == "Team Zero"
    assert body["disabled"] is False and body["disabled_at"] is None
    waiting, suites = body["quotas"]["max_waiting_evaluations"], body["quotas"]["max_suites"]
    assert waiting["own"] == 7 and waiting["effective"] == 7 and waiting["default"] >= 1
    assert suites["own"] is None and suites["effective"] == suites["default"]
    assert body["adapters"] == 0 and body["active_tokens"] == 0
    assert admin.get(f"/v1/tenants/{name}").json() == body
    listed = {t["name"]: t for t in all_tenants(admin)}
    assert listed[name] == body and {"acme", "globex"} <= set(listed)

    renamed = admin.patch(f"/v1/tenants/{name}", json={"display_name": "Team One", "max_suites": 3,
                                                       "max_waiting_evaluations": None})

    assert renamed.status_code == 200, renamed.text
    after = renamed.json()
    assert after["name"] == name and after["display_name"] == "Team One"  # the slug stays
    assert after["quotas"]["max_suites"] == {**suites, "own": 3, "effective": 3}
    assert after["quotas"]["max_waiting_evaluations"] == {**waiting, "own": None,
                                                          "effective": waiting["default"]}
    created_event, updated_event = events(admin, name)
    assert created_event["action"] == "tenant.created"
    assert created_event["after"]["display_name"] == "Team Zero"
    assert "global_admin" in created_event["actor"]
    assert updated_event["action"] == "tenant.updated"
    assert updated_event["before"] == {"display_name": "Team Zero", "max_waiting_evaluations": 7,
                                       "max_suites": None}
    assert updated_event["after"] == {"display_name": "Team One", "max_waiting_evaluations": None,
                                      "max_suites": 3}

    # The same change again changes nothing, and records nothing.
    again = admin.patch(f"/v1/tenants/{name}", json={"display_name": "Team One"})
    assert again.json() == after and len(events(admin, name)) == 2


def test_a_tenant_made_by_its_first_token_is_audited_as_created(admin):
    name = fresh()
    issued = admin.post("/v1/tokens", json={"subject": "first", "role": "uploader", "tenant": name})
    assert issued.status_code == 201, issued.text

    (event,) = events(admin, name)
    assert event["action"] == "tenant.created" and event["after"]["name"] == name
    shown = admin.get(f"/v1/tenants/{name}").json()
    assert shown["active_tokens"] == 1 and shown["display_name"] is None


@pytest.mark.parametrize(("method", "path", "body", "status", "code", "message"), [
    ("POST", "/v1/tenants", {"name": "Bad Name"}, 422, "invalid_name", "invalid tenant name 'Bad Name'"),
    ("POST", "/v1/tenants", {"name": "{existing}"}, 409, "already_exists",
     "tenant '{existing}' already exists"),
    ("POST", "/v1/tenants", {"name": "{new}", "max_suites": -1}, 422, "invalid_request",
     "body.max_suites: Input should be greater than or equal to 1"),
    ("POST", "/v1/tenants", {"name": "{new}", "max_waiting_evaluations": 0}, 422, "invalid_request",
     "body.max_waiting_evaluations: Input should be greater than or equal to 1"),
    ("PATCH", "/v1/tenants/{existing}", {"name": "renamed"}, 422, "invalid_request", SLUG_FIXED),
    ("PATCH", "/v1/tenants/{existing}", {"max_suites": -3}, 422, "invalid_request",
     "body.max_suites: Input should be greater than or equal to 1"),
    ("PATCH", "/v1/tenants/{existing}", {"disabled": "yes"}, 422, "invalid_request",
     "body.disabled: Input should be a valid boolean"),
    ("PATCH", "/v1/tenants/{new}", {"display_name": "Nobody"}, 404, "tenant_not_found",
     "tenant '{new}' does not exist"),
    ("GET", "/v1/tenants/{new}", None, 404, "tenant_not_found", "tenant '{new}' does not exist"),
], ids=["bad name", "duplicate", "negative quota", "zero quota", "name in patch",
        "negative quota in patch", "not a boolean", "unknown tenant patched", "unknown tenant read"])
def test_a_refused_request_changes_nothing(admin, engine, method, path, body, status, code, message):
    existing, new = fresh(), fresh()
    assert admin.post("/v1/tenants", json={"name": existing, "max_suites": 5}).status_code == 201

    def fill(text: str) -> str:
        return text.replace("{existing}", existing).replace("{new}", new)

    before = state(engine)
    json_body = {k: fill(v) if isinstance(v, str) else v for k, v in body.items()} if body else None

    refused = admin.request(method, fill(path), json=json_body)

    assert_refused(refused, status, code, fill(message))
    assert refused.json()["error"]["message"] == fill(message)
    assert state(engine) == before
    assert admin.get(f"/v1/tenants/{existing}").json()["quotas"]["max_suites"]["own"] == 5


def test_disabling_refuses_every_token_of_the_tenant_and_enabling_restores_them(
        admin, engine, registry, client_of):
    name = fresh()
    assert admin.post("/v1/tenants", json={"name": name}).status_code == 201
    uploader = client_of(token_for(engine, name, Role.UPLOADER))
    tenant_admin = client_of(token_for(engine, name, Role.ADMIN))
    assert uploader.get("/v1/whoami").status_code == 200

    disabled = admin.patch(f"/v1/tenants/{name}", json={"disabled": True})

    assert disabled.status_code == 200, disabled.text
    assert disabled.json()["disabled"] is True and disabled.json()["disabled_at"]
    for client in (uploader, tenant_admin):
        refused = client.get("/v1/whoami")
        assert_refused(refused, 401, "tenant_disabled", f"tenant '{name}' is disabled")
        assert refused.json()["error"]["message"] == f"tenant '{name}' is disabled"
        assert f"loraplane tenant enable {name}" in refused.json()["error"]["hint"]
        assert refused.headers["www-authenticate"] == "Bearer"
    assert_refused(uploader.get("/v1/adapters"), 401, "tenant_disabled", f"tenant '{name}' is disabled")
    # Nor is a token issued for it, by anyone.
    before = state(engine)
    issued = admin.post("/v1/tokens", json={"subject": "late", "role": "uploader", "tenant": name})
    assert_refused(issued, 409, "tenant_disabled", f"tenant '{name}' is disabled, so no token is issued for it")
    assert state(engine) == before
    # Disabling again keeps the time it was disabled and records nothing more.
    again = admin.patch(f"/v1/tenants/{name}", json={"disabled": True})
    assert again.json()["disabled_at"] == disabled.json()["disabled_at"]

    enabled = admin.patch(f"/v1/tenants/{name}", json={"disabled": False})

    assert enabled.status_code == 200 and enabled.json()["disabled"] is False
    assert enabled.json()["disabled_at"] is None
    assert uploader.get("/v1/whoami").json()["tenant"] == name
    assert tenant_admin.get(f"/v1/tenants/{name}").status_code == 200
    updates = [e for e in events(admin, name) if e["action"] == "tenant.updated"]
    assert [(e["before"], e["after"]) for e in updates] == [
        ({"disabled": False}, {"disabled": True}), ({"disabled": True}, {"disabled": False})]


def test_a_tenants_own_suite_quota_replaces_the_default(admin, engine, base_model, client_of):
    name = fresh()
    assert admin.post("/v1/tenants", json={"name": name, "max_suites": 1}).status_code == 201
    uploader = client_of(token_for(engine, name, Role.UPLOADER))
    body = {"tenant": name, "base_model": base_model, "examples": [{"prompt": "1 =>", "reference": "one"}],
            "metrics": {"exact_match": {"min": 0.5}}}
    assert uploader.post("/v1/eval-suites", json={**body, "name": "own-1"}).status_code == 201
    with Session(engine) as session:
        suites = session.scalar(select(func.count()).select_from(EvalSuite))

    refused = uploader.post("/v1/eval-suites", json={**body, "name": "own-2"})

    assert_refused(refused, 409, "quota_exceeded",
                   f"tenant '{name}' owns 1 eval suites, its quota (tenant quota is 1)")
    assert f"loraplane tenant quota {name} --max-suites N" in refused.json()["error"]["hint"]
    with Session(engine) as session:
        assert session.scalar(select(func.count()).select_from(EvalSuite)) == suites

    # Back to the default (200 unless the deployment says otherwise): the suite is accepted.
    assert admin.patch(f"/v1/tenants/{name}", json={"max_suites": None}).status_code == 200
    assert uploader.post("/v1/eval-suites", json={**body, "name": "own-2"}).status_code == 201


def test_a_tenants_own_waiting_quota_replaces_the_default(admin, engine, base_model, make_adapter,
                                                          client_of):
    name = fresh()
    suites = [fresh("tn-suite") for _ in range(2)]
    for suite in suites:
        create_suite(admin, suite, base_model, [{"prompt": "1 =>", "reference": "one"}],
                     {"exact_match": {"min": 0.5}})
    assert admin.post("/v1/tenants", json={"name": name}).status_code == 201
    uploader = client_of(token_for(engine, name, Role.UPLOADER))
    version = upload_dir(uploader, f"{name}/quota", make_adapter(seed=93))
    waiting = sum(e["state"] in ("queued", "running") for e in evaluations_of(uploader, version))
    path = f"/v1/adapters/{name}/quota/versions/{version['number']}/evaluations"
    assert admin.patch(f"/v1/tenants/{name}", json={"max_waiting_evaluations": waiting + 1}).status_code == 200
    accepted = uploader.post(path, json={"suite": suites[0]})
    assert accepted.status_code in (200, 201, 202), accepted.text
    count = len(evaluations_of(uploader, version))

    refused = uploader.post(path, json={"suite": suites[1]})

    assert_refused(refused, 429, "quota_exceeded",
                   f"tenant '{name}' has {waiting + 1} evaluations waiting or running, and may have "
                   f"at most {waiting + 1} (tenant quota); 1 more would pass it")
    assert refused.headers["Retry-After"] == "60"
    assert len(evaluations_of(uploader, version)) == count


def test_a_tenant_admin_reads_its_own_tenant_only_and_changes_nothing(admin, engine, client_of,
                                                                      client_for):
    mine, theirs = fresh(), fresh()
    for name in (mine, theirs):
        assert admin.post("/v1/tenants", json={"name": name}).status_code == 201
    lead = client_of(token_for(engine, mine, Role.ADMIN))

    listed = lead.get("/v1/tenants").json()
    assert [t["name"] for t in listed["items"]] == [mine] and listed["next_cursor"] is None
    assert lead.get(f"/v1/tenants/{mine}").json()["active_tokens"] == 1
    before = state(engine)
    assert_refused(lead.get(f"/v1/tenants/{theirs}"), 403, "forbidden",
                   f"this token belongs to tenant '{mine}', not '{theirs}'")
    assert_refused(lead.patch(f"/v1/tenants/{mine}", json={"display_name": "Mine"}), 403, "forbidden",
                   "role 'admin' may not do this; it needs a global admin")
    assert_refused(lead.patch(f"/v1/tenants/{mine}", json={"disabled": True}), 403, "forbidden",
                   "it needs a global admin")
    assert_refused(lead.post("/v1/tenants", json={"name": fresh()}), 403, "forbidden",
                   "it needs a global admin")
    assert_refused(client_for("acme_uploader").get("/v1/tenants"), 403, "forbidden",
                   "role 'uploader' may not do this; it needs admin")
    assert state(engine) == before
