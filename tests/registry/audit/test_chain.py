"""The audit log is append-only and hash-chained: the database refuses edits, and verification
finds a row edited or removed behind the database's back."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import sqlalchemy
from sqlalchemy import text
from sqlalchemy.orm import Session

from registry import audit, migrate
from registry.audit.verify import verify_chain
from registry.db import make_engine
from tests.support import services
from tests.support.asserts import assert_refused

LORAPLANE = Path(sys.executable).parent / "loraplane"


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


@pytest.fixture
def tampered_database(postgres) -> str:
    """A database of its own: these tests break its chain on purpose."""
    url = services.create_database(postgres.url, "audit_tamper")
    migrate.upgrade(url)
    engine = make_engine(url, pooled=False)
    for i in range(6):
        with Session(engine) as session, session.begin():
            audit.record(session, actor="tests", action="demo.event", subject=f"thing/{i}", after={"i": i})
    engine.dispose()
    return url


def run_verify(url: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(LORAPLANE), "audit", "verify"], capture_output=True, text=True,
                          env={**os.environ, "LORAPLANE_DATABASE_URL": url}, timeout=60)


def tamper(url: str, statement: str) -> None:
    engine = make_engine(url, pooled=False)
    with engine.begin() as connection:
        # Someone with the database owner's rights can switch triggers off; the chain still tells.
        connection.execute(text("SET LOCAL session_replication_role = replica"))
        connection.execute(text(statement))
    engine.dispose()


def test_verify_finds_an_edited_row_and_a_removed_row(tampered_database):
    intact = run_verify(tampered_database)
    assert intact.returncode == 0, intact.stderr
    assert "audit chain intact: 6 events" in intact.stdout

    tamper(tampered_database, "UPDATE audit_events SET after = '{\"i\": 99}' WHERE subject = 'thing/1'")
    tamper(tampered_database, "DELETE FROM audit_events WHERE subject = 'thing/3'")

    broken = run_verify(tampered_database)
    engine = make_engine(tampered_database, pooled=False)
    with Session(engine) as session:
        ids = dict(session.execute(text("SELECT subject, id FROM audit_events")).all())
        report = verify_chain(session)
    engine.dispose()
    assert [(p.id, p.kind) for p in report.problems] == [(ids["thing/1"], "altered"),
                                                         (ids["thing/4"], "removed_before")]
    assert broken.returncode == 1
    assert f"altered event {ids['thing/1']}" in broken.stderr
    assert f"removed_before event {ids['thing/4']}" in broken.stderr
    assert "the audit chain is broken: 2 problem(s) in 5 events" in broken.stderr


def test_audit_filters(admin, client_for, promo_pools, make_ready, uploader, second_reviewer):
    from tests.support.promotions import request_promotion

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
    from registry.db import after_commit

    fired = []
    with Session(engine) as session, session.begin():
        audit.record(session, actor="tests", action="savepoint.outer", subject="savepoint/1")
        after_commit(session, lambda: fired.append("committed"))
        with session.begin_nested():
            pass  # released: the outer transaction has not committed yet
        assert fired == []
        with pytest.raises(ValueError), session.begin_nested():
            raise ValueError("rolled back to the savepoint")
        assert [e["action"] for e in audit.pending(session)] == ["savepoint.outer"]

    assert fired == ["committed"]
    events = admin.get("/v1/audit", params={"action": "savepoint.outer"}).json()["items"]
    assert [e["subject"] for e in events] == ["savepoint/1"]
    assert admin.get("/v1/audit/verify").json()["intact"]
