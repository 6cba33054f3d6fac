"""Every approval and rollback is a signed attestation: the active set carries it, it verifies
against the trust bundle at the well-known URL, and its statement names the bytes, the people
(identities), the evaluations and the audit event of the change."""

from __future__ import annotations

import base64
import json

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import select
from sqlalchemy.orm import Session

from devkit.pipeline_steps import request_promotion
from registry.tables import AuditEvent
from signed_digests import provenance
from tests.support.asserts import assert_refused
from tests.support.promotions import active_set

BUNDLE = "/.well-known/loraplane/trust-bundle.json"


def approve(requester: httpx.Client, approver: httpx.Client, pool: str, version: dict) -> dict:
    promotion = request_promotion(requester, pool, version).json()
    approved = approver.post(f"/v1/promotions/{promotion['id']}/approve", json={"comment": "evals fine"})
    assert approved.status_code == 200, approved.text
    return approved.json()


def entry_of(active: dict, served_name: str) -> dict:
    return next(e for e in active["entries"] if e["served_name"] == served_name)


def test_an_approval_is_attested_in_the_active_set(promo_pools, make_ready, client_for, admin,
                                                   second_reviewer, engine, registry):
    pool = promo_pools["open"]
    version = make_ready("attested")
    served = f"acme/attested@{version['number']}"
    promotion = approve(client_for("acme_reviewer"), second_reviewer, pool, version)

    entry = entry_of(active_set(admin, pool), served)
    bundle = provenance.TrustBundle.parse(httpx.get(registry.url + BUNDLE).json())
    statement = bundle.verify(entry["attestation"])

    provenance.check_subject(statement, served, version["digest"],
                             [{"name": f["name"], "sha256": f["sha256"]} for f in entry["files"]])
    facts = statement["predicate"]
    assert (facts["action"], facts["pool"], facts["served_name"], facts["alias"], facts["weight"]) == \
        ("approve", pool, served, "production", 100)
    assert facts["promotion_id"] == promotion["id"]
    whoami = {name: client_for(name).get("/v1/whoami").json()["identity_id"]
              for name in ("acme_uploader", "acme_reviewer")}
    assert facts["uploader"]["identity_id"] == whoami["acme_uploader"]
    assert facts["requester"]["identity_id"] == whoami["acme_reviewer"]
    assert facts["approver"]["identity_id"] == second_reviewer.get("/v1/whoami").json()["identity_id"]
    assert facts["comment"] == "evals fine"
    assert [e["suite"] for e in facts["evaluations"]] == ["promo-suite"]
    assert facts["evaluations"][0]["metrics"]["exact_match"]["passed"] is True
    assert facts["base_model"]["name"] == "promo-base" and len(facts["base_model"]["config_sha256"]) == 64
    with Session(engine) as session:
        activated = session.scalar(select(AuditEvent.hash).where(
            AuditEvent.action == "promotion.activated",
            AuditEvent.subject == f"pool/{pool}/{served}").order_by(AuditEvent.id.desc()).limit(1))
    assert facts["audit_event_hash"] == activated

    listed = client_for("acme_reviewer").get(
        f"/v1/adapters/acme/attested/versions/{version['number']}/attestations")
    assert listed.status_code == 200, listed.text
    [shown] = listed.json()
    assert (shown["pool"], shown["action"], shown["verified"], shown["problem"]) == (pool, "approve", True, None)
    assert shown["envelope"] == entry["attestation"] and shown["audit_event_hash"] == activated


def test_another_tenant_cannot_read_a_versions_attestations(promo_pools, make_ready, client_for):
    version = make_ready("attested-private")
    path = f"/v1/adapters/acme/attested-private/versions/{version['number']}/attestations"

    assert_refused(client_for("globex_admin").get(path), 403, "forbidden",
                   "this token belongs to tenant 'globex', not 'acme'")
    assert_refused(httpx.get(client_for("acme_admin").base_url.join(path)), 401, "unauthorized",
                   "missing bearer token")


def test_a_rollback_is_attested_for_the_version_it_restores(promo_pools, make_ready, client_for,
                                                             second_reviewer, admin, registry):
    pool = promo_pools["open"]
    first, second = make_ready("attested-rollback"), make_ready("attested-rollback")
    reviewer = client_for("acme_reviewer")
    approve(reviewer, second_reviewer, pool, first)
    approve(reviewer, second_reviewer, pool, second)

    rolled = second_reviewer.post(f"/v1/pools/{pool}/aliases/acme/attested-rollback/production/rollback",
                                  json={"comment": "latency regression"})
    assert rolled.status_code == 200, rolled.text

    entry = entry_of(active_set(admin, pool), f"acme/attested-rollback@{first['number']}")
    bundle = provenance.TrustBundle.parse(httpx.get(registry.url + BUNDLE).json())
    facts = bundle.verify(entry["attestation"])["predicate"]
    assert (facts["action"], facts["comment"], facts["promotion_id"]) == \
        ("rollback", "latency regression", rolled.json()["id"])


def test_the_trust_bundle_is_public_and_signed_by_every_key_it_lists(registry):
    response = httpx.get(registry.url + BUNDLE)

    assert response.status_code == 200
    bundle = provenance.TrustBundle.parse(response.json())
    # One signing key; keys rotated out earlier in the session keep an end of trust.
    assert [key.not_after for key in bundle.keys.values()].count(None) == 1
    forged = dict(response.json())
    document = json.loads(base64.b64decode(forged["payload"]))
    document["keys"].append({**document["keys"][0], "public_key": base64.b64encode(
        Ed25519PrivateKey.generate().public_key().public_bytes_raw()).decode()})
    forged["payload"] = base64.b64encode(json.dumps(document).encode()).decode()
    with pytest.raises(provenance.Unverified, match="not signed by every key it lists"):
        provenance.TrustBundle.parse(forged)


def test_a_rotation_shorter_than_the_minimum_overlap_is_refused_and_nothing_changes(admin, registry):
    before = httpx.get(registry.url + BUNDLE).json()

    refused = admin.post("/v1/attestation-keys/rotate", json={"overlap_s": 60})

    assert_refused(refused, 422, "overlap_too_short",
                   "an overlap of 60 s is shorter than this registry's minimum of 3600 s")
    assert provenance.TrustBundle.parse(httpx.get(registry.url + BUNDLE).json()).keys.keys() == \
        provenance.TrustBundle.parse(before).keys.keys()
    assert admin.get("/readyz").status_code == 200
