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
    with Session(engine) as session, session.begin():  # the other version's blob, already stored
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
    with Session(engine) as session, session.begin():
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
