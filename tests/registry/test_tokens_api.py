"""Tokens over the API: each scope lists and revokes only what it may, tokens expire, and every
change is audited with the identities involved."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy import update
from sqlalchemy.orm import Session

from registry.tables import ApiToken
from tests.support.asserts import assert_refused
from tests.support.nodes import issue_token
from devkit.units_of_work import unit_of_work


def token_count(engine) -> int:
    with Session(engine) as session:
        return session.query(ApiToken).count()


def as_client(registry, plain: str) -> httpx.Client:
    return httpx.Client(base_url=registry.url, headers={"Authorization": f"Bearer {plain}"}, timeout=30)


def whoami(client: httpx.Client) -> dict:
    return client.get("/v1/whoami").json()


def test_each_scope_lists_only_the_tokens_it_may_manage(client_for, admin):
    acme = client_for("acme_admin").get("/v1/tokens").json()["items"]
    assert acme and {t["tenant"] for t in acme} == {"acme"}
    assert all("token" not in t for t in acme)  # secrets are never listed
    me = whoami(client_for("acme_uploader"))
    mine = client_for("acme_uploader").get("/v1/tokens").json()["items"]
    assert me["token_id"] in {t["id"] for t in mine}
    assert {t["identity_id"] for t in mine} == {me["identity_id"]}  # its own identity's only
    assert_refused(client_for("acme_admin").get("/v1/tokens", params={"tenant": "globex"}), 403,
                   "forbidden", "this token belongs to tenant 'acme', not 'globex'")
    globex = admin.get("/v1/tokens", params={"tenant": "globex"}).json()["items"]
    assert {t["tenant"] for t in globex} == {"globex"}


def test_an_issued_token_records_its_issuer_identity_and_expiry(registry, client_for, admin):
    lead = client_for("acme_admin")
    created = lead.post("/v1/tokens", json={"subject": "new-reviewer", "role": "reviewer",
                                            "tenant": "acme", "ttl_days": 7}).json()
    assert created["issued_by_token_id"] == whoami(lead)["token_id"]
    assert created["identity_name"] == "new-reviewer" and created["identity_id"] != whoami(lead)["identity_id"]
    expires = datetime.fromisoformat(created["expires_at"])
    assert timedelta(days=6, hours=23) < expires - datetime.now(UTC) <= timedelta(days=7)
    event = admin.get("/v1/audit", params={"action": "token.create", "subject": f"token/{created['id']}"}).json()["items"][0]
    assert event["after"]["identity"] == created["identity_id"]
    assert event["after"]["issued_by_token"] == whoami(lead)["token_id"]
    assert f"identity {whoami(lead)['identity_id']}" in event["actor"]


def test_a_lifetime_beyond_the_maximum_is_refused(client_for, engine):
    response = client_for("acme_admin").post("/v1/tokens", json={
        "subject": "forever", "role": "reviewer", "tenant": "acme", "ttl_days": 3650})
    assert_refused(response, 422, "invalid_token_ttl", "a token lives 1 to 365 days, not 3650")
    with Session(engine) as session:
        assert session.query(ApiToken).filter(ApiToken.subject == "forever").count() == 0
    assert client_for("acme_admin").get("/readyz").status_code == 200


def test_a_token_never_outlives_the_token_that_issued_it(registry, admin, client_with):
    short = admin.post("/v1/tokens", json={"subject": "short-lead", "role": "admin", "tenant": "acme",
                                           "ttl_days": 1}).json()
    child = client_with(short["token"]).post("/v1/tokens", json={
        "subject": "long-child", "role": "admin", "tenant": "acme", "ttl_days": 365}).json()
    assert child["expires_at"] == short["expires_at"]


def test_revoking_with_issued_ends_a_departed_admins_whole_lineage(registry, admin, client_with):
    lead = admin.post("/v1/tokens", json={"subject": "departing-lead", "role": "admin",
                                          "tenant": "acme"}).json()
    lead_client = client_with(lead["token"])
    child = lead_client.post("/v1/tokens", json={"subject": "its-admin", "role": "admin",
                                                 "tenant": "acme"}).json()
    grandchild = client_with(child["token"]).post("/v1/tokens", json={
        "subject": "its-reviewer", "role": "reviewer", "tenant": "acme"}).json()
    bystander = issue_token(admin, "bystander", role="reviewer", tenant="acme")

    revoked = admin.post(f"/v1/tokens/{lead['id']}/revoke", params={"with_issued": True})

    assert revoked.status_code == 200, revoked.text
    for plain in (lead["token"], child["token"], grandchild["token"]):
        assert_refused(as_client(registry, plain).get("/v1/whoami"), 401, "unauthorized",
                       "invalid or revoked token")
    assert as_client(registry, bystander).get("/v1/whoami").status_code == 200


def test_a_subject_cannot_forge_the_structured_part_of_an_audit_actor(client_for, engine):
    before = token_count(engine)
    for subject in ("acme_reviewer (reviewer@acme, identity 4, token 4)", "x\u202ey", "x\u200by"):
        response = client_for("globex_admin").post("/v1/tokens", json={
            "subject": subject, "role": "uploader", "tenant": "globex"})
        assert response.status_code == 422, response.text
        assert response.json()["error"]["message"].startswith("body.subject")
    assert token_count(engine) == before


def test_an_expired_token_is_refused(registry, admin, engine):
    plain = issue_token(admin, "short-lived", role="uploader", tenant="acme")
    client = as_client(registry, plain)
    token_id = whoami(client)["token_id"]
    with unit_of_work(engine) as session:
        session.execute(update(ApiToken).where(ApiToken.id == token_id)
                        .values(expires_at=datetime.now(UTC) - timedelta(seconds=1)))

    assert_refused(client.get("/v1/adapters"), 401, "token_expired", "this token has expired")


def test_admins_revoke_their_scope_anyone_their_own_and_nobody_another_tenants(registry, admin, client_for):
    victim_plain = issue_token(admin, "acme-victim", role="uploader", tenant="acme")
    victim = as_client(registry, victim_plain)
    victim_id = whoami(victim)["token_id"]

    by_globex = client_for("globex_admin").post(f"/v1/tokens/{victim_id}/revoke")
    by_peer = client_for("acme_reviewer").post(f"/v1/tokens/{victim_id}/revoke")

    for refused in (by_globex, by_peer):
        assert_refused(refused, 404, "token_not_found", f"token {victim_id} does not exist")
    assert victim.get("/v1/whoami").status_code == 200

    revoked = client_for("acme_admin").post(f"/v1/tokens/{victim_id}/revoke")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"]
    assert_refused(victim.get("/v1/whoami"), 401, "unauthorized", "invalid or revoked token")
    again = client_for("acme_admin").post(f"/v1/tokens/{victim_id}/revoke")
    assert again.status_code == 200 and again.json()["revoked_at"] == revoked.json()["revoked_at"]
    events = admin.get("/v1/audit", params={"action": "token.revoke", "subject": f"token/{victim_id}"}).json()["items"]
    assert len(events) == 1  # revoking twice is one change

    own_plain = issue_token(admin, "leaver", role="reviewer", tenant="acme")
    own = as_client(registry, own_plain)
    assert own.post(f"/v1/tokens/{whoami(own)['token_id']}/revoke").status_code == 200
    assert own.get("/v1/whoami").status_code == 401
