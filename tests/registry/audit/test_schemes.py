"""Events written before the keyed chain keep verifying with their plain hashes; every event
after it is keyed, on Postgres and on the embedded default's SQLite alike."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from sqlalchemy import text

from devkit import services
from migrations import runner
from registry.audit import anchor
from registry.audit.chain import GENESIS, event_hash
from registry.db import make_engine
from tests.registry.audit.tools import head_file_setting, record_events, run_verify, said, tamper

BEFORE_0006 = sa.table(
    "audit_events", sa.column("at", sa.DateTime(timezone=True)), sa.column("actor"),
    sa.column("action"), sa.column("subject"), sa.column("tenant_id"), sa.column("before", sa.JSON),
    sa.column("after", sa.JSON), sa.column("prev_hash"), sa.column("hash"))


def schemes(url: str) -> list[tuple[str, str]]:
    engine = make_engine(url, pooled=False)
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT subject, hash_scheme FROM audit_events ORDER BY id")).all()
    engine.dispose()
    return [tuple(row) for row in rows]


def test_a_chain_written_before_the_keyed_scheme_still_verifies(postgres, tmp_path):
    url = services.create_database(postgres.url, "audit_schemes")
    runner.upgrade(url, "0005")
    engine = make_engine(url, pooled=False)
    prev = GENESIS
    with engine.begin() as connection:  # as the registry wrote events until 0006: plain sha256
        for i in range(3):
            fields = dict(at=datetime.now(UTC), actor="tests", action="demo.event",
                          subject=f"old/{i}", tenant_id=None, before=None, after={"i": i})
            digest = event_hash(prev, **fields)
            connection.execute(sa.insert(BEFORE_0006).values(**fields, prev_hash=prev, hash=digest))
            prev = digest
    engine.dispose()
    runner.upgrade(url)

    with head_file_setting(tmp_path / "audit-head.json"):
        record_events(url, ["new/0", "new/1"])
        assert schemes(url) == [("old/0", "sha256"), ("old/1", "sha256"), ("old/2", "sha256"),
                                ("new/0", "hmac-sha256"), ("new/1", "hmac-sha256")]
        intact = run_verify(url)
        assert intact.returncode == 0, intact.stderr
        assert "audit chain intact: 5 events" in intact.stdout

        tamper(url, "UPDATE audit_events SET actor = 'someone else' WHERE subject = 'old/1'")
        broken = run_verify(url)
    assert broken.returncode == 1
    assert ("altered event 2: event 2 (demo.event old/1) does not match its hash: it was edited "
            "after it was written") in said(broken)
    assert "the audit chain is broken: 1 problem(s) in 5 events" in said(broken)


def test_the_embedded_default_keeps_a_keyed_anchored_append_only_chain(tmp_path):
    url = f"sqlite:///{tmp_path / 'loraplane.db'}"
    runner.upgrade(url)
    with head_file_setting(tmp_path / "audit-head.json"):
        record_events(url, ["a", "b"])
        result = run_verify(url)
        head = anchor.read(tmp_path / "audit-head.json")
    assert result.returncode == 0, result.stderr
    assert "audit chain intact: 2 events" in result.stdout
    assert f"the head recorded at {head.at} (event 2, 2 events) is in the chain" in result.stdout
    assert schemes(url) == [("a", "hmac-sha256"), ("b", "hmac-sha256")]

    engine = make_engine(url)
    for statement in ("UPDATE audit_events SET actor = 'someone else'", "DELETE FROM audit_events"):
        with pytest.raises(sa.exc.DBAPIError, match="audit events are append-only"):
            with engine.begin() as connection:
                connection.execute(text(statement))
    engine.dispose()
    assert schemes(url) == [("a", "hmac-sha256"), ("b", "hmac-sha256")]
