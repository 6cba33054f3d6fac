"""A tenant's upload-signing keys and signing policy: only its admins and global admins read or
change them, only EC public keys of the curves model-signing verifies are kept, every change is
audited, and every refusal changes nothing."""

from __future__ import annotations

import hashlib
import json

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from registry.tables import AuditEvent, Tenant, TenantSigningKey
from tests.registry.signing_keys_support import add_key, new_key, new_tenant, private_pem, public_pem
from tests.support.asserts import assert_refused
from tests.support.cli import cli


@pytest.fixture(scope="module")
def team(engine, client_with):
    return new_tenant(engine, client_with, "keys")


def keys_path(tenant: str) -> str:
    return f"/v1/tenants/{tenant}/signing-keys"


def state(engine) -> dict:
    """Everything a refused key or policy change could have written."""
    with Session(engine) as session:
        keys = session.execute(select(TenantSigningKey.id, TenantSigningKey.revoked_at)
                               .order_by(TenantSigningKey.id)).all()
        return {"keys": keys,
                "policies": session.execute(select(Tenant.name, Tenant.require_signed_uploads)
                                            .order_by(Tenant.id)).all(),
                "audit_events": session.scalar(select(func.count()).select_from(AuditEvent))}


def assert_unchanged(engine, client, before: dict) -> None:
    assert state(engine) == before
    assert client.get("/readyz").status_code == 200


def test_an_admin_adds_lists_and_revokes_its_tenants_keys_and_each_change_is_audited(team, admin):
    key = new_key(ec.SECP384R1())
    der = key.public_key().public_bytes(serialization.Encoding.DER,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)
    # Sent with CRLF line ends, kept as cryptography writes it (the spelling model-signing hashes).
    sent = public_pem(key).replace("\n", "\r\n")

    added = team.admin.post(keys_path(team.name), json={"name": "release", "public_key_pem": sent})

    assert added.status_code == 201, added.text
    body = added.json()
    assert body["fingerprint"] == hashlib.sha256(der).hexdigest()
    assert body["public_key_pem"] == public_pem(key)
    assert body["revoked_at"] is None and f"{team.name}-admin" in body["created_by"]
    assert [k["name"] for k in team.admin.get(keys_path(team.name)).json()] == ["release"]

    revoked = team.admin.post(f"{keys_path(team.name)}/release/revoke")
    again = team.admin.post(f"{keys_path(team.name)}/release/revoke")

    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    assert again.json()["revoked_at"] == revoked.json()["revoked_at"]  # safe to repeat
    assert team.admin.get(keys_path(team.name)).json() == []
    listed = team.admin.get(keys_path(team.name), params={"include_revoked": "true"}).json()
    assert [(k["name"], k["revoked_at"]) for k in listed] == [("release", revoked.json()["revoked_at"])]
    events = admin.get("/v1/audit",
                       params={"subject": f"{team.name}/signing-keys/release"}).json()["items"]
    assert sorted(e["action"] for e in events) == ["signing_key.add", "signing_key.revoke"]
    assert {e["after"]["fingerprint"] for e in events} == {body["fingerprint"]}


def test_a_global_admin_manages_any_tenants_keys(team, admin):
    added = admin.post(keys_path(team.name), json={"name": "by-operator",
                                                   "public_key_pem": public_pem(new_key())})
    assert added.status_code == 201, added.text
    assert "by-operator" in {k["name"] for k in admin.get(keys_path(team.name)).json()}


@pytest.mark.parametrize("principal", ["globex_admin", "acme_uploader", "acme_reviewer"])
def test_no_one_else_lists_adds_or_revokes_a_tenants_keys(engine, client_for, principal):
    acme_admin = client_for("acme_admin")
    add_key(acme_admin, "acme", f"kept-from-{principal.replace('_', '-')}", new_key())
    client = client_for(principal)
    message = ("this token belongs to tenant 'globex', not 'acme'" if principal == "globex_admin"
               else f"role '{principal.split('_')[1]}' may not do this; it needs admin")
    before = state(engine)

    listed = client.get(keys_path("acme"))
    added = client.post(keys_path("acme"),
                        json={"name": "intruder", "public_key_pem": public_pem(new_key())})
    revoked = client.post(f"{keys_path('acme')}/kept-from-{principal.replace('_', '-')}/revoke")
    policy = client.put("/v1/tenants/acme/signing-policy", json={"require_signed_uploads": False})

    for response in (listed, added, revoked, policy):
        assert_refused(response, 403, "forbidden", message)
    assert_unchanged(engine, client, before)


def test_a_node_token_may_not_read_keys(engine, client_for):
    assert_refused(client_for("serving_node").get(keys_path("acme")), 403, "forbidden",
                   "role 'node' may not do this; it needs admin")


# (id, PEM text, code, message)
REFUSED_KEYS = [
    ("private_key", private_pem(new_key()), "private_key_refused",
     "this is a private key; a signing key is added by its public key only"),
    ("public_and_private", public_pem(new_key()) + private_pem(new_key()), "private_key_refused",
     "this is a private key"),
    ("rsa", public_pem(rsa.generate_private_key(public_exponent=65537, key_size=2048)),
     "unsupported_key_type", "RSA keys are not supported; model-signing verifies EC keys on P-256, "
                             "P-384 or P-521"),
    ("ed25519", public_pem(ed25519.Ed25519PrivateKey.generate()), "unsupported_key_type",
     "Ed25519 keys are not supported"),
    ("secp256k1", public_pem(new_key(ec.SECP256K1())), "unsupported_key_type",
     "EC keys on secp256k1 are not supported"),
    ("not_pem", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIO", "invalid_public_key",
     "public_key_pem is not a PEM public key"),
    ("truncated", public_pem(new_key())[:-60], "invalid_public_key",
     "public_key_pem is not a PEM public key"),
]


@pytest.mark.parametrize(("pem", "code", "message"), [case[1:] for case in REFUSED_KEYS],
                         ids=[case[0] for case in REFUSED_KEYS])
def test_a_key_that_is_not_a_supported_public_key_is_refused(team, engine, pem, code, message):
    before = state(engine)

    response = team.admin.post(keys_path(team.name), json={"name": "refused", "public_key_pem": pem})

    assert_refused(response, 422, code, message)
    assert "PRIVATE" not in response.text and "BEGIN" not in response.json()["error"]["message"]
    assert_unchanged(engine, team.admin, before)


def test_an_oversized_key_is_refused_before_it_is_parsed(team, engine):
    before = state(engine)

    response = team.admin.post(keys_path(team.name),
                               json={"name": "huge", "public_key_pem": "A" * 8193})

    assert_refused(response, 422, "invalid_request",
                   "body.public_key_pem: String should have at most 8192 characters")
    assert_unchanged(engine, team.admin, before)


def test_a_name_or_key_already_in_use_is_refused(team, engine):
    key = new_key()
    add_key(team.admin, team.name, "ci", key)
    before = state(engine)

    same_name = team.admin.post(keys_path(team.name),
                                json={"name": "ci", "public_key_pem": public_pem(new_key())})
    same_key = team.admin.post(keys_path(team.name),
                               json={"name": "ci-2", "public_key_pem": public_pem(key)})

    assert_refused(same_name, 409, "already_exists",
                   f"tenant '{team.name}' already has a signing key named 'ci'")
    assert_refused(same_key, 409, "already_exists",
                   f"this key is already signing key 'ci' of tenant '{team.name}'")
    assert_unchanged(engine, team.admin, before)


def test_revoking_an_unknown_key_or_reaching_an_unknown_tenant_is_a_404(team, admin, engine):
    before = state(engine)

    unknown_key = team.admin.post(f"{keys_path(team.name)}/never-added/revoke")
    unknown_tenant = admin.get(keys_path("no-such-tenant"))

    assert_refused(unknown_key, 404, "signing_key_not_found",
                   f"tenant '{team.name}' has no signing key named 'never-added'")
    assert_refused(unknown_tenant, 404, "tenant_not_found", "tenant 'no-such-tenant' does not exist")
    assert_unchanged(engine, admin, before)


def test_signed_uploads_can_be_required_only_once_the_tenant_has_a_key(engine, client_with, admin):
    tenant = new_tenant(engine, client_with, "policy")
    policy_path = f"/v1/tenants/{tenant.name}/signing-policy"
    before = state(engine)

    refused = tenant.admin.put(policy_path, json={"require_signed_uploads": True})

    assert_refused(refused, 422, "no_signing_keys", f"tenant '{tenant.name}' has no signing keys, so "
                                                    "requiring signed uploads would refuse every upload")
    assert_unchanged(engine, tenant.admin, before)
    add_key(tenant.admin, tenant.name, "team", new_key())

    required = tenant.admin.put(policy_path, json={"require_signed_uploads": True})

    assert required.status_code == 200, required.text
    assert required.json() == {"tenant": tenant.name, "require_signed_uploads": True, "active_keys": 1}
    assert tenant.admin.get(policy_path).json() == required.json()
    event = admin.get("/v1/audit", params={"action": "tenant.signing_policy",
                                           "subject": f"tenant/{tenant.name}"}).json()["items"]
    assert [(e["before"], e["after"]) for e in event] == [({"require_signed_uploads": False},
                                                           {"require_signed_uploads": True})]


def test_the_cli_adds_lists_requires_and_revokes_keys(engine, client_with, registry, tmp_path):
    tenant = new_tenant(engine, client_with, "cli")
    token = tenant.admin.headers["Authorization"].removeprefix("Bearer ")
    key = new_key()
    (tmp_path / "team.pub").write_text(public_pem(key))
    (tmp_path / "team.key").write_text(private_pem(key))

    added = cli("signing-key", "add", tenant.name, "team", "--public-key", str(tmp_path / "team.pub"),
                token=token, url=registry.url)
    required = cli("signing-key", "require", tenant.name, token=token, url=registry.url)
    private = cli("signing-key", "add", tenant.name, "oops", "--public-key", str(tmp_path / "team.key"),
                  token=token, url=registry.url)
    revoked = cli("signing-key", "revoke", tenant.name, "team", token=token, url=registry.url)
    listed = cli("signing-key", "list", tenant.name, "--include-revoked", token=token, url=registry.url)

    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout)["public_key_pem"] == public_pem(key)
    assert required.returncode == 0, required.stderr
    assert f"uploads of {tenant.name} must be signed (1 active key(s))" in required.stderr
    assert private.returncode == 1
    assert "this is a private key; a signing key is added by its public key only" in private.stderr
    assert "PRIVATE KEY" not in private.stdout + private.stderr
    assert revoked.returncode == 0, revoked.stderr
    assert [(k["name"], k["revoked_at"] is not None) for k in json.loads(listed.stdout)] == [("team", True)]
