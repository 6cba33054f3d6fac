"""An approval signs the bytes that were uploaded and evaluated, as the sealed audit events
recorded them: a database writer who points an evaluated version at another blob already in the
store, or who edits the record of its evaluation, gets a refusal, not a signature; and so does a
reviewer who was shown another digest than the one about to be signed."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from devkit.pipeline_steps import request_promotion
from registry.tables import Adapter, AdapterVersion, Attestation, AuditEvent, Promotion
from tests.support.asserts import assert_refused
from devkit.units_of_work import unit_of_work


def version_row(engine, name: str) -> AdapterVersion:
    with Session(engine) as session:
        return session.scalar(select(AdapterVersion).join(Adapter, Adapter.id == AdapterVersion.adapter_id)
                              .where(Adapter.name == name))


def attestations(engine) -> int:
    with Session(engine) as session:
        return session.scalar(select(func.count()).select_from(Attestation))


def state_of(engine, promotion_id: int) -> str:
    with Session(engine) as session:
        return session.get(Promotion, promotion_id).state


@pytest.fixture
def awaiting(make_ready, uploader, promo_pools):
    """A version evaluated and awaiting approval in the open pool, and another version's bytes."""
    def make(name: str) -> tuple[dict, dict, int]:
        version, other = make_ready(name), make_ready(f"{name}-other")
        promotion = request_promotion(uploader, promo_pools["open"], version)
        assert promotion.status_code == 201, promotion.text
        return version, other, promotion.json()["id"]
    return make


def test_bytes_swapped_in_the_database_after_their_evaluation_are_never_signed(awaiting, engine, second_reviewer):
    version, other, promotion_id = awaiting("swapped-after-eval")
    swap = version_row(engine, "swapped-after-eval-other")
    with unit_of_work(engine) as session:  # the other version's blob, already stored
        session.execute(update(AdapterVersion).where(AdapterVersion.digest == version["digest"])
                        .values(digest=swap.digest, files=swap.files))
    signed = attestations(engine)

    refused = second_reviewer.post(f"/v1/promotions/{promotion_id}/approve", json={"comment": "looks good"})

    assert_refused(refused, 409, "evaluated_bytes_changed",
                   f"the upload recorded {version['digest'][:12]}…, the version now says {swap.digest[:12]}…")
    assert f"ran on {version['digest'][:12]}…" in refused.json()["error"]["message"]
    assert state_of(engine, promotion_id) == "awaiting_approval" and attestations(engine) == signed


def test_records_a_database_owner_rewrites_for_swapped_bytes_are_not_believed(
        awaiting, engine, database_url, second_reviewer):
    """The owner switches the append-only triggers off and makes the upload's and the pass's
    records name the swapped bytes, without the registry's audit key to hash them with."""
    from sqlalchemy import text

    from tests.registry.audit.tools import as_owner_without_triggers

    version, _, promotion_id = awaiting("rewritten-records")
    swap = version_row(engine, "rewritten-records-other")
    served = f"acme/rewritten-records@{version['number']}"
    with Session(engine) as session:
        originals = {row.id: row.after for row in session.scalars(select(AuditEvent).where(
            AuditEvent.subject == served, AuditEvent.action.in_(("adapter_version.upload", "evaluation.passed"))))}
    assert len(originals) == 2
    with unit_of_work(engine) as session:
        session.execute(update(AdapterVersion).where(AdapterVersion.digest == version["digest"])
                        .values(digest=swap.digest, files=swap.files))
    with as_owner_without_triggers(database_url) as owner:
        for event_id, after in originals.items():
            owner.execute(text("UPDATE audit_events SET after = CAST(:after AS JSON) WHERE id = :id"),
                          {"after": json.dumps({**after, "digest": swap.digest}), "id": event_id})
    signed = attestations(engine)
    try:
        refused = second_reviewer.post(f"/v1/promotions/{promotion_id}/approve", json={"comment": "ok"})
    finally:  # the shared chain as it was: other tests verify it
        with as_owner_without_triggers(database_url) as owner:
            for event_id, after in originals.items():
                owner.execute(text("UPDATE audit_events SET after = CAST(:after AS JSON) WHERE id = :id"),
                              {"after": json.dumps(after), "id": event_id})

    assert_refused(refused, 409, "evaluated_bytes_changed", "no sealed upload event records its digest")
    assert "has no sealed record of its pass" in refused.json()["error"]["message"]
    assert state_of(engine, promotion_id) == "awaiting_approval" and attestations(engine) == signed


def test_a_reviewer_approves_only_the_digest_they_were_shown(awaiting, engine, second_reviewer):
    version, _, promotion_id = awaiting("seen-digest")
    signed = attestations(engine)

    refused = second_reviewer.post(f"/v1/promotions/{promotion_id}/approve",
                                   json={"comment": "ok", "digest": "0" * 64})

    assert_refused(refused, 409, "evaluated_bytes_changed",
                   f"the reviewer saw 000000000000…, the version now says {version['digest'][:12]}…")
    assert state_of(engine, promotion_id) == "awaiting_approval" and attestations(engine) == signed
    approved = second_reviewer.post(f"/v1/promotions/{promotion_id}/approve",
                                    json={"comment": "ok", "digest": version["digest"]})
    assert approved.status_code == 200, approved.text
    assert approved.json()["state"] == "active" and attestations(engine) == signed + 1


def test_a_canary_whose_bytes_were_swapped_is_held_with_the_reason_not_promoted(
        make_ready, client_for, second_reviewer, admin, engine, client_with):
    """The analysis passes, but its production promotion would sign bytes nobody evaluated."""
    import uuid

    from tests.registry.canaries.test_canary_flow import judge, window
    from tests.support.nodes import issue_token

    pool = "signed-canary"
    assert admin.post("/v1/pools", json={"name": pool, "base_model": "promo-base", "max_loras": 2,
                                         "max_cpu_loras": 64, "max_lora_rank": 16,
                                         "canary_min_routers": 1}).status_code == 201
    first = make_ready("held-canary")
    created = request_promotion(client_for("acme_uploader"), pool, first)
    assert second_reviewer.post(f"/v1/promotions/{created.json()['id']}/approve", json={"comment": "ok"}).status_code == 200
    version, other = make_ready("held-canary"), make_ready("held-canary-other")
    body = {"adapter": "acme/held-canary", "version": version["number"], "alias": "canary",
            "analysis": {"window_s": 60, "min_requests": 20, "steps": [{"weight": 10}]}}
    canary = client_for("acme_uploader").post(f"/v1/pools/{pool}/promotions", json=body).json()
    assert second_reviewer.post(f"/v1/promotions/{canary['id']}/approve", json={"comment": "ok"}).status_code == 200
    swap = version_row(engine, "held-canary-other")
    with unit_of_work(engine) as session:
        session.execute(update(AdapterVersion).where(AdapterVersion.digest == version["digest"])
                        .values(digest=swap.digest, files=swap.files))
    router = client_with(issue_token(admin, "signed-router", role="router", pool=pool, instance_id="signed-router"))
    assert router.put(f"/v1/pools/{pool}/routers/signed-router/traffic", json={
        "requests_per_s": {}, "report_id": str(uuid.uuid4()), "windows": [
            window(version["served_name"], "canary", 30), window(first["served_name"], "production", 30)]}).status_code == 204
    signed = attestations(engine)

    judge(engine, canary["id"], after_s=61)

    status = client_for("acme_reviewer").get(f"/v1/promotions/{canary['id']}/canary").json()
    assert status["state"] == "paused"
    with Session(engine) as session:
        held = session.get(Promotion, canary["id"]).analysis_state["held_because"]
    assert "cannot be signed" in held and "the upload recorded" in held
    assert attestations(engine) == signed
    aliases = {a["alias"]: a["served_name"] for a in admin.get(f"/v1/pools/{pool}/aliases").json()
               if a["adapter"] == "held-canary"}
    assert aliases["production"] == first["served_name"]


def test_a_rollback_restores_only_what_the_alias_served_before(make_ready, uploader, second_reviewer,
                                                              promo_pools, engine, admin):
    """A database writer points the active promotion's `previous_id` at a promotion of another
    adapter (or one never activated): a reviewer's routine rollback refuses it, and signs nothing."""
    pool = promo_pools["open"]
    ids = []
    for _ in range(2):
        version = make_ready("rolled-forward")
        created = request_promotion(uploader, pool, version)
        assert second_reviewer.post(f"/v1/promotions/{created.json()['id']}/approve",
                                    json={"comment": "ok"}).status_code == 200
        ids.append(created.json()["id"])
    elsewhere = request_promotion(uploader, pool, make_ready("someone-elses"))  # awaiting, never active
    with unit_of_work(engine) as session:
        session.get(Promotion, ids[1]).previous_id = elsewhere.json()["id"]
    signed = attestations(engine)

    refused = second_reviewer.post(f"/v1/pools/{pool}/aliases/acme/rolled-forward/production/rollback",
                                   json={"comment": "back"})

    assert_refused(refused, 409, "nothing_to_roll_back", "is not one this alias served")
    assert state_of(engine, ids[1]) == "active" and attestations(engine) == signed
