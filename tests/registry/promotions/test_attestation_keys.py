"""Rotating the attestation key: during the overlap both keys are trusted and the old attestations
still verify; the active set is re-signed with the new key at once, and after the overlap only the
re-signed attestations verify. On a registry with a database and key folder of its own, since a
rotation changes what every registry sharing them publishes."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import text

from devkit import services
from devkit.pipeline_steps import create_suite, finish_evaluation, request_promotion, upload_dir
from devkit.services import wait_for
from devkit.tiny_model import build_adapter
from migrations import runner
from registry.auth.principal import Role
from registry.db import make_engine
from registry.tokens import issuing as token_service
from signed_digests import provenance
from tests.support.asserts import assert_refused
from tests.support.evals import request_evaluation
from tests.support.promotions import active_set
from devkit.units_of_work import unit_of_work

BUNDLE = "/.well-known/loraplane/trust-bundle.json"
OVERLAP_S = 3


@pytest.fixture(scope="module")
def rotating(service_dir: Path, postgres, s3, tmp_path_factory) -> Iterator[dict]:
    database_url = services.create_database(postgres.url, "attestation_keys")
    runner.upgrade(database_url)
    engine = make_engine(database_url)
    tokens = {}
    with unit_of_work(engine) as session:
        for subject, role, tenant in (("root", Role.ADMIN, None), ("kim", Role.REVIEWER, "acme"),
                                      ("lee", Role.REVIEWER, "acme"), ("ann", Role.UPLOADER, "acme"),
                                      ("acme-admin", Role.ADMIN, "acme")):
            _, tokens[subject] = token_service.create_token(session, subject=subject, role=role,
                                                            tenant=tenant, actor="tests")
    keys = tmp_path_factory.mktemp("rotating-keys")
    server = services.start_registry(tmp_path_factory.mktemp("registry-rotating"), {
        "LORAPLANE_DATABASE_URL": database_url, "LORAPLANE_STORAGE": "s3",
        "LORAPLANE_S3_ENDPOINT_URL": s3.url, "LORAPLANE_S3_BUCKET": "loraplane-test",
        "LORAPLANE_ATTESTATION_KEY_DIR": str(keys), "LORAPLANE_ATTESTATION_MIN_OVERLAP_S": "1"})
    clients = {name: httpx.Client(base_url=server.url, timeout=60,
                                  headers={"Authorization": f"Bearer {plain}"})
               for name, plain in tokens.items()}
    yield {"server": server, "engine": engine, "clients": clients, "keys": keys}
    for client in clients.values():
        client.close()
    server.stop()
    engine.dispose()


def approved_entry(rotating: dict, tiny_base: Path, tmp_path: Path) -> dict:
    root, acme = rotating["clients"]["root"], rotating["clients"]
    config = json.loads((tiny_base / "config.json").read_text())
    assert root.post("/v1/base-models", json={"name": "keys-base", "config": config}).status_code == 201
    create_suite(root, "keys-suite", "keys-base", [{"prompt": "1 2 =>", "reference": "one two"}],
                 {"exact_match": {"min": 0.5}, "parity": {"max_logprob_diff": 0.01}})
    pool = {"name": "keys", "base_model": "keys-base", "dtype": "float32", "max_loras": 2,
            "max_cpu_loras": 4, "max_lora_rank": 8}
    assert root.post("/v1/pools", json=pool).status_code == 201
    folder = build_adapter(tiny_base, tmp_path / "adapter", r=8, lora_alpha=16,
                           target_modules=("q_proj", "v_proj"), seed=7, base_model_name="keys-base")
    version = upload_dir(acme["ann"], "acme/keyed", folder)
    evaluation = request_evaluation(acme["ann"], version, "keys-suite")
    finish_evaluation(rotating["engine"], evaluation["id"])
    requested = request_promotion(acme["kim"], "keys", version)
    assert requested.status_code == 201, requested.text
    promotion = requested.json()
    approved = acme["lee"].post(f"/v1/promotions/{promotion['id']}/approve", json={"comment": "ok"})
    assert approved.status_code == 200, approved.text
    [entry] = active_set(root, "keys")["entries"]
    return entry


def bundle(rotating: dict) -> provenance.TrustBundle:
    return provenance.TrustBundle.parse(httpx.get(rotating["server"].url + BUNDLE).json())


def test_rotation_keeps_old_attestations_valid_through_the_overlap(rotating, tiny_base, tmp_path):
    entry = approved_entry(rotating, tiny_base, tmp_path)
    before = bundle(rotating)
    old = entry["attestation"]
    assert before.verify(old)

    refused = rotating["clients"]["acme-admin"].post("/v1/attestation-keys/rotate", json={})
    assert_refused(refused, 403, "forbidden", "global admin")
    assert bundle(rotating).keys.keys() == before.keys.keys()  # nothing rotated

    rotated = rotating["clients"]["root"].post("/v1/attestation-keys/rotate", json={"overlap_s": OVERLAP_S})

    assert rotated.status_code == 200, rotated.text
    body = rotated.json()
    assert body["retired_key_id"] == old["signatures"][0]["keyid"] and body["resigned"] == 1
    during = provenance.TrustBundle.parse(httpx.get(rotating["server"].url + BUNDLE).json(),
                                          trusted_by=before)  # a node moves on from what it pinned
    assert set(during.keys) == {body["retired_key_id"], body["key_id"]}
    assert during.verify(old)["predicate"]["served_name"] == entry["served_name"]
    [resigned] = active_set(rotating["clients"]["root"], "keys")["entries"]
    assert resigned["attestation"]["signatures"][0]["keyid"] == body["key_id"]
    assert provenance.unverified_statement(resigned["attestation"]) == provenance.unverified_statement(old)

    deadline = time.monotonic() + OVERLAP_S + 10
    while body["retired_key_id"] in bundle(rotating).keys and time.monotonic() < deadline:
        time.sleep(0.2)  # the overlap has to run out; the bundle says when it has
    published = httpx.get(rotating["server"].url + BUNDLE).json()
    after = provenance.TrustBundle.parse(published, trusted_by=during)
    assert set(after.keys) == {body["key_id"]}
    # After the overlap the retired key signs nothing, the bundle included, and its private half
    # is gone from the folder: a node that missed the whole overlap is re-pinned by its operator.
    assert [s["keyid"] for s in published["signatures"]] == [body["key_id"]]
    assert not (rotating["keys"] / f"{body['retired_key_id']}.pem").exists()
    with pytest.raises(provenance.Unverified, match="not signed by any key the node already trusts"):
        provenance.TrustBundle.parse(published, trusted_by=before)
    with pytest.raises(provenance.Unverified, match="which the trust bundle does not hold"):
        after.verify(old)
    with pytest.raises(provenance.Unverified, match="whose trust ended at"):
        during.verify(old)  # a node still holding the overlap's bundle sees the old key expired
    assert after.verify(resigned["attestation"])["predicate"]["pool"] == "keys"
    events = rotating["clients"]["root"].get("/v1/audit", params={"action": "attestation_key.rotated"})
    assert [e["subject"] for e in events.json()["items"]] == [f"attestation-key/{body['key_id']}"]


def test_a_forged_attestation_row_is_never_signed_by_a_rotation(rotating):
    """Someone with the database (not the key) adds a row that claims another key signed a
    statement of their own, so that the next rotation would sign it. The rotation re-signs only
    what this registry's keys signed; the forged row is left as it is, and no node takes it."""
    root = rotating["clients"]["root"]
    [entry] = active_set(root, "keys")["entries"]
    statement = provenance.unverified_statement(entry["attestation"])
    statement["subject"][0]["digest"]["sha256"] = "0" * 64  # other bytes
    forged = {"payloadType": provenance.IN_TOTO_PAYLOAD,
              "payload": base64.b64encode(provenance.canonical(statement)).decode(),
              "signatures": [{"keyid": "f" * 64, "sig": base64.b64encode(bytes(64)).decode()}]}
    with rotating["engine"].begin() as db:
        db.execute(text(
            "INSERT INTO attestations (pool_id, version_id, action, key_id, statement_sha256, envelope) "
            "SELECT pool_id, version_id, 'approve', :kid, :sha, CAST(:envelope AS JSON) FROM attestations "
            "ORDER BY id DESC LIMIT 1"), {"kid": "f" * 64, "sha": "0" * 64, "envelope": json.dumps(forged)})
        db.execute(text("UPDATE pools SET generation = generation + 1 WHERE name = 'keys'"))

    rotated = root.post("/v1/attestation-keys/rotate", json={"overlap_s": 60})

    assert rotated.status_code == 200, rotated.text
    assert rotated.json()["resigned"] == 0
    # Served as the database holds it (once the registry has re-read the generation), signed by nobody.
    entry = wait_for(lambda: (e := active_set(root, "keys")["entries"][0])["attestation"] == forged and e,
                     what="the forged row in the active set")
    with pytest.raises(provenance.Unverified, match="which the trust bundle does not hold"):
        bundle(rotating).verify(entry["attestation"])
    with rotating["engine"].begin() as db:
        db.execute(text("DELETE FROM attestations WHERE key_id = :kid"), {"kid": "f" * 64})


def test_backfill_attests_what_was_approved_before_attestations_existed(rotating):
    root, admin = rotating["clients"]["root"], rotating["clients"]["acme-admin"]
    with rotating["engine"].begin() as db:
        db.execute(text("DELETE FROM attestations"))  # as a registry from before attestations left it

    refused = admin.post("/v1/attestations/backfill")
    assert_refused(refused, 403, "forbidden", "global admin")
    with rotating["engine"].begin() as db:
        assert db.execute(text("SELECT count(*) FROM attestations")).scalar() == 0

    done = root.post("/v1/attestations/backfill")

    assert done.status_code == 200 and done.json() == {"attested": 1}
    [entry] = active_set(root, "keys")["entries"]
    facts = bundle(rotating).verify(entry["attestation"])["predicate"]
    with rotating["engine"].begin() as db:
        activated = db.execute(text(
            "SELECT hash FROM audit_events WHERE action = 'promotion.activated' AND subject = :subject "
            "ORDER BY id DESC LIMIT 1"), {"subject": f"pool/keys/{entry['served_name']}"}).scalar()
    assert (facts["action"], facts["audit_event_hash"]) == ("backfill", activated)
    assert root.post("/v1/attestations/backfill").json() == {"attested": 0}  # nothing left to do


def test_an_emergency_rotation_ends_the_compromised_keys_trust_on_every_node_that_follows(rotating):
    """The current key leaked. Its trust ends now: the next bundle, which it signs one last time,
    names that end, nodes pinned on it take it, and from then on nothing it signs is believed."""
    from cryptography.hazmat.primitives import serialization

    root = rotating["clients"]["root"]
    pinned = bundle(rotating)
    [entry] = active_set(root, "keys")["entries"]
    leaked = entry["attestation"]["signatures"][0]["keyid"]
    stolen = serialization.load_pem_private_key((rotating["keys"] / f"{leaked}.pem").read_bytes(), None)
    for body, code, message in (({"emergency": True, "overlap_s": 60}, "overlap_in_emergency",
                                 "an emergency rotation has no overlap"),
                                ({"emergency": "soon"}, "invalid_request", "emergency")):
        assert_refused(root.post("/v1/attestation-keys/rotate", json=body), 422, code, message)
    assert bundle(rotating).keys.keys() == pinned.keys.keys()
    # Whoever holds the key signs a statement about other bytes into the database first: the
    # rotation must not copy it under the new key.
    statement = provenance.unverified_statement(entry["attestation"])
    statement["subject"][0]["digest"]["sha256"] = "0" * 64
    forged = provenance.envelope(provenance.IN_TOTO_PAYLOAD, statement, [(leaked, stolen.sign)])
    with rotating["engine"].begin() as db:
        db.execute(text(
            "INSERT INTO attestations (pool_id, version_id, promotion_id, action, key_id, statement_sha256, "
            "envelope) SELECT pool_id, version_id, promotion_id, 'approve', :kid, :sha, CAST(:envelope AS JSON) "
            "FROM attestations ORDER BY id DESC LIMIT 1"),
            {"kid": leaked, "sha": "0" * 64, "envelope": json.dumps(forged)})

    rotated = root.post("/v1/attestation-keys/rotate", json={"emergency": True})

    assert rotated.status_code == 200, rotated.text
    body = rotated.json()
    assert body["emergency"] and body["retired_key_id"] == leaked and body["resigned"] == 1
    followed = provenance.TrustBundle.parse(httpx.get(rotating["server"].url + BUNDLE).json(),
                                            trusted_by=pinned)  # the node obeys
    assert followed.keys[leaked].not_after <= datetime.now(UTC)
    with pytest.raises(provenance.Unverified, match="whose trust ended at"):
        followed.verify(entry["attestation"])
    [resigned] = wait_for(lambda: (e := active_set(root, "keys")["entries"])[0]["attestation"]["signatures"][0]
                          ["keyid"] == body["key_id"] and e, what="the re-signed attestation")
    assert followed.verify(resigned["attestation"])["predicate"]["pool"] == "keys"
    assert provenance.unverified_statement(resigned["attestation"])["subject"][0]["digest"]["sha256"] \
        == entry["digest"]  # signed afresh from the evidence, not the forged row
    # Whoever holds the leaked key signs a bundle of their own: a node that followed refuses it.
    attacker = Ed25519PrivateKey.generate()
    raw = attacker.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    document = {"version": followed.version + 1, "issued_at": datetime.now(UTC).isoformat(),
                "keys": [{"key_id": provenance.key_id(raw), "algorithm": provenance.ALGORITHM,
                          "public_key": base64.b64encode(raw).decode(), "not_after": None}]}
    forged = provenance.envelope(provenance.BUNDLE_PAYLOAD, document, [
        (leaked, stolen.sign), (provenance.key_id(raw), attacker.sign)])
    with pytest.raises(provenance.Unverified, match="not signed by any key the node already trusts"):
        provenance.TrustBundle.parse(forged, trusted_by=followed)
