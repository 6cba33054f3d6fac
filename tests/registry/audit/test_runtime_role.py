"""The registry runs as a database role that does not own the audit log, with exactly the grants
docs/security.md gives: it appends events and reads them, and cannot change, truncate, unguard
or drop them. The owner who ran the migrations is refused by the triggers instead."""

from __future__ import annotations

import re
import secrets
from pathlib import Path

import httpx
import psycopg
import pytest
from sqlalchemy import text

from devkit import services
from migrations import runner
from registry.auth.principal import Role
from devkit.units_of_work import unit_of_work
from registry.db import make_engine
from registry.tokens import issuing as token_service
from tests.registry.audit.tools import head_file_setting

SECURITY_DOC = Path(__file__).resolve().parents[3] / "docs" / "security.md"
NOT_OWNER = "must be owner of table audit_events"
NO_PRIVILEGE = "permission denied for table audit_events"
REFUSED_TO_THE_APP = [
    ("TRUNCATE audit_events", NO_PRIVILEGE),
    ("UPDATE audit_events SET actor = 'someone else'", NO_PRIVILEGE),
    ("DELETE FROM audit_events", NO_PRIVILEGE),
    ("ALTER TABLE audit_events DISABLE TRIGGER audit_events_append_only", NOT_OWNER),
    ("ALTER TABLE audit_events DISABLE TRIGGER USER", NOT_OWNER),
    ("DROP TRIGGER audit_events_no_truncate ON audit_events", "must be owner of relation audit_events"),
    ("DROP TABLE audit_events", NOT_OWNER),
    ("SET session_replication_role = replica",
     'permission denied to set parameter "session_replication_role"'),
]


def documented_grants() -> str:
    """The GRANT block of docs/security.md's "Audit trail" section, as an operator pastes it."""
    section = SECURITY_DOC.read_text().split("\n## Audit trail\n", 1)[1]
    return next(block for block in re.findall(r"```sql\n(.*?)```", section, re.S) if "GRANT" in block)


@pytest.fixture
def roles(postgres) -> dict[str, str]:
    """A database owned by an owner role that is not a superuser, and an app role beside it."""
    suffix = secrets.token_hex(3)
    owner, app, database = f"lp_owner_{suffix}", f"lp_app_{suffix}", f"audit_roles_{suffix}"
    with psycopg.connect(postgres.url.replace("+psycopg", "") + "/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {owner} LOGIN")
        conn.execute(f"CREATE ROLE {app} LOGIN")
        conn.execute(f'CREATE DATABASE "{database}" OWNER {owner}')
    host = postgres.url.split("@", 1)[1]
    return {"owner": f"postgresql+psycopg://{owner}@{host}/{database}", "app_role": app,
            "app": f"postgresql+psycopg://{app}@{host}/{database}"}


def refusal(url: str, statement: str) -> str:
    engine = make_engine(url, pooled=False)
    try:
        with engine.begin() as connection:
            connection.execute(text(statement))
    except Exception as error:  # noqa: BLE001  the database's own words are what is checked
        return str(error.__cause__ or error)
    finally:
        engine.dispose()
    return "accepted"


def event_count(url: str) -> int:
    engine = make_engine(url, pooled=False)
    with engine.connect() as connection:
        count = connection.execute(text("SELECT count(*) FROM audit_events")).scalar()
    engine.dispose()
    return count


def test_the_registry_runs_as_a_role_that_can_append_but_not_rewrite(roles, service_dir, tmp_path):
    runner.upgrade(roles["owner"])
    owner = make_engine(roles["owner"], pooled=False)
    with owner.begin() as connection:
        connection.execute(text(documented_grants().replace("loraplane_app", roles["app_role"])))
    owner.dispose()
    app = make_engine(roles["app"], pooled=False)
    with head_file_setting(tmp_path / "audit-head.json"), unit_of_work(app) as session:
        _, admin_token = token_service.create_token(session, subject="role-admin", role=Role.ADMIN,
                                                    tenant=None, actor="tests")
    app.dispose()

    registry = services.start_registry(service_dir / f"registry-{roles['app_role']}",
                                       {"LORAPLANE_DATABASE_URL": roles["app"]})
    try:
        client = httpx.Client(base_url=registry.url, headers={"Authorization": f"Bearer {admin_token}"})
        created = client.post("/v1/tokens", json={"subject": "role-reviewer", "role": "reviewer",
                                                  "tenant": "acme"})
        assert created.status_code == 201, created.text
        # The admin's token, the registry's key fingerprints published as it started, the
        # reviewer's tenant (made with its first token) and the reviewer's token.
        assert event_count(roles["app"]) == 4

        for statement, message in REFUSED_TO_THE_APP:
            assert message in refusal(roles["app"], statement), statement
        # The owner may run the migrations, but the triggers refuse even the owner.
        assert "audit events are append-only" in refusal(roles["owner"], "TRUNCATE audit_events")

        assert event_count(roles["app"]) == 4
        report = client.get("/v1/audit/verify").json()
        assert report["intact"] and report["events"] == 4 and report["problems"] == []
        assert report["external_head"]["last_id"] == 4 and report["external_head"]["count"] == 4
        assert client.get("/readyz").status_code == 200
        client.close()
    finally:
        registry.stop()
