"""The audit log is append-only and hash-chained: the database refuses edits, deletes and
truncation, and verification finds a row edited or removed behind the database's back."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import sqlalchemy
from sqlalchemy import text
from sqlalchemy.orm import Session

from registry import audit
from registry.audit.verify import verify_chain
from registry.db import make_engine
from tests.registry.audit.tools import run_verify, said, tamper
from tests.support.asserts import assert_refused


def test_events_made_on_two_registry_processes_at_once_form_one_intact_chain(
        registry, second_registry, tokens, admin):
    clients = [httpx.Client(base_url=url, headers={"Authorization": f"Bearer {tokens['global_admin']}"})
               for url in (registry.url, second_registry.url)]

    def create(i: int) -> int:
        return clients[i % 2].post("/v1/tokens", json={"subject": f"chain-{i}", "role": "reviewer",
                                                        "tenant": "acme"}).status_code

    with ThreadPoolExecutor(8) as executor:
        assert set(executor.map(create, range(40))) == {201}
    for client in clients:
        client.close()

    report = admin.get("/v1/audit/verify").json()
    assert report["intact"] and report["problems"] == [] and report["events"] >= 40
    events = admin.get("/v1/audit", params={"action": "token.create", "limit": 200}).json()["items"]
    everything = admin.get("/v1/audit", params={"limit": 200}).json()["items"]
    assert {e["after"]["subject"] for e in events} >= {f"chain-{i}" for i in range(40)}
    assert all(later["prev_hash"] == earlier["hash"] for earlier, later in zip(everything, everything[1:]))


def test_the_database_refuses_to_edit_or_delete_events(engine, admin):
    first = admin.get("/v1/audit", params={"limit": 1}).json()["items"][0]
    for statement in ("UPDATE audit_events SET actor = 'someone else' WHERE id = :id",
                      "DELETE FROM audit_events WHERE id = :id"):
        with pytest.raises(sqlalchemy.exc.DBAPIError, match="audit events are append-only"):
            with engine.begin() as connection:
                connection.execute(text(statement), {"id": first["id"]})
    assert admin.get("/v1/audit", params={"limit": 1}).json()["items"][0] == first


@pytest.mark.parametrize("replica", [False, True], ids=["normally", "in_replication_mode"])
def test_the_database_refuses_truncate_and_replication_mode_lifts_no_refusal(tampered_database, replica):
    """Even the table's owner, and a superuser switching triggers off for replication, is refused;
    only disabling the triggers outright (owners only) gets through, and the chain tells then."""
    engine = make_engine(tampered_database.url, pooled=False)
    for statement in ("TRUNCATE audit_events", "UPDATE audit_events SET actor = 'someone else'",
                      "DELETE FROM audit_events"):
        with pytest.raises(sqlalchemy.exc.DBAPIError, match="audit events are append-only"):
            with engine.begin() as connection:
                if replica:
                    connection.execute(text("SET LOCAL session_replication_role = replica"))
                connection.execute(text(statement))
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM audit_events")).scalar() == 6
    engine.dispose()
    assert run_verify(tampered_database.url).returncode == 0


def test_verify_finds_an_edited_row_and_a_removed_row(tampered_database):
    url = tampered_database.url
    intact = run_verify(url)
    assert intact.returncode == 0, intact.stderr
    assert "audit chain intact: 6 events" in intact.stdout

    tamper(url, "UPDATE audit_events SET after = '{\"i\": 99}' WHERE subject = 'thing/1'")
    tamper(url, "DELETE FROM audit_events WHERE subject = 'thing/3'")

    broken = run_verify(url)
    engine = make_engine(url, pooled=False)
    with Session(engine) as session:
        ids = dict(session.execute(text("SELECT subject, id FROM audit_events")).all())
        report = verify_chain(session)
    engine.dispose()
    # The head kept outside the database still counts the removed event.
    assert [(p.id, p.kind) for p in report.problems] == [(ids["thing/1"], "altered"),
                                                         (ids["thing/4"], "removed_before"),
                                                         (ids["thing/5"], "head_mismatch")]
    assert broken.returncode == 1
    assert f"altered event {ids['thing/1']}" in said(broken)
    assert f"removed_before event {ids['thing/4']}" in said(broken)
    assert (f"head_mismatch event {ids['thing/5']}: the head recorded outside the database at "
            in said(broken))
    assert f"counts 6 events through event {ids['thing/5']}, and the chain now holds 5" in said(broken)
    assert "the audit chain is broken: 3 problem(s) in 5 events" in said(broken)


def test_audit_filters(admin, client_for, promo_pools, make_ready, uploader, second_reviewer):
    from devkit.pipeline_steps import request_promotion

    promotion = request_promotion(uploader, promo_pools["open"], make_ready("audited")).json()
    second_reviewer.post(f"/v1/promotions/{promotion['id']}/approve", json={"comment": "fine"})
    subject = f"pool/{promo_pools['open']}/acme/audited@1"

    by_subject = admin.get("/v1/audit", params={"subject": subject}).json()["items"]
    approved = admin.get("/v1/audit", params={"action": "promotion.approved", "actor": "acme_reviewer_2",
                                              "subject": subject}).json()["items"]
    acme = client_for("acme_admin").get("/v1/audit", params={"subject": subject}).json()["items"]
    globex = client_for("globex_admin").get("/v1/audit", params={"subject": subject}).json()["items"]
    future = admin.get("/v1/audit", params={"subject": subject, "since": "2999-01-01T00:00:00Z"}).json()

    assert [e["action"] for e in by_subject] == ["promotion.requested", "promotion.approved",
                                                 "promotion.activated"]
    assert len(approved) == 1 and approved[0]["after"]["comment"] == "fine"
    assert acme == by_subject and globex == [] and future["items"] == []
    assert_refused(client_for("acme_admin").get("/v1/audit", params={"tenant": "globex"}), 403,
                   "forbidden", "belongs to tenant 'acme'")
    assert_refused(client_for("acme_reviewer").get("/v1/audit"), 403, "forbidden", "role 'reviewer'")


def test_savepoints_neither_seal_nor_drop_the_outer_transactions_events(engine, admin):
    from registry import pending_work
    from registry.unit_of_work import UnitOfWork

    fired = []
    work = UnitOfWork(Session(engine), wake=lambda _: fired.append("committed"))
    session = work.session
    audit.record(session, actor="tests", action="savepoint.outer", subject="savepoint/1")
    pending_work.of(session).announcements.append({"kind": "probe"})
    with session.begin_nested():
        pass  # released: the outer transaction has not committed yet
    assert fired == []
    with pytest.raises(ValueError), session.begin_nested():
        raise ValueError("rolled back to the savepoint")
    assert [e["action"] for e in audit.pending(session)] == ["savepoint.outer"]
    work.commit()
    work.close()

    assert fired == ["committed"]
    events = admin.get("/v1/audit", params={"action": "savepoint.outer"}).json()["items"]
    assert [e["subject"] for e in events] == ["savepoint/1"]
    assert admin.get("/v1/audit/verify").json()["intact"]
