"""Someone holding the database owner's credentials, but not the registry's key, rewrites the
audit chain: edits an event and recomputes every hash after it, truncates the chain and builds
another, cuts its newest events, or adds events of their own. Each of these passed the old
check, which looked at the chain alone; now each is found and said plainly."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from sqlalchemy import Connection, insert, select, text, update
from sqlalchemy.orm import Session

from registry.audit import anchor
from registry.audit.chain import GENESIS, event_hash
from registry.audit.verify import verify_chain
from registry.db import make_engine
from registry.tables import AuditEvent
from tests.registry.audit.tools import as_owner_without_triggers, record_events, run_verify, said

EVENTS = AuditEvent.__table__
CONTENT = ("at", "actor", "action", "subject", "tenant_id", "before", "after")


def rehash(connection: Connection, *, start_at: int = 1, key: bytes | None = None,
           scheme: str = "sha256", edits: dict[int, dict] | None = None) -> None:
    """Edit events and recompute every hash from `start_at` on, as a consistent chain."""
    rows = connection.execute(select(EVENTS).order_by(EVENTS.c.id)).mappings().all()
    prev = GENESIS
    for row in rows:
        fields = {name: row[name] for name in CONTENT}
        if row["id"] < start_at:
            prev = row["hash"]
            continue
        fields.update((edits or {}).get(row["id"], {}))
        digest = event_hash(prev, **fields, key=key)
        connection.execute(update(EVENTS).where(EVENTS.c.id == row["id"]).values(
            **fields, prev_hash=prev, hash=digest, hash_scheme=scheme))
        prev = digest


def rebuild(connection: Connection, count: int) -> None:
    """Truncate the chain and write another one from genesis, with plain hashes."""
    connection.execute(text("TRUNCATE audit_events RESTART IDENTITY"))
    prev = GENESIS
    for i in range(count):
        fields = dict(at=datetime.now(UTC), actor="tests", action="demo.event", subject=f"forged/{i}",
                      tenant_id=None, before=None, after={"i": i})
        digest = event_hash(prev, **fields)
        connection.execute(insert(EVENTS).values(**fields, prev_hash=prev, hash=digest,
                                                 hash_scheme="sha256"))
        prev = digest


def edit_and_recompute(connection):
    rehash(connection, edits={3: {"after": {"i": 99}}})


def edit_and_recompute_keeping_the_keyed_label(connection):
    rehash(connection, start_at=3, edits={3: {"after": {"i": 99}}}, key=secrets.token_bytes(32),
           scheme="hmac-sha256")


def truncate_and_rebuild_longer(connection):
    rebuild(connection, 8)


def truncate_and_rebuild_shorter(connection):
    rebuild(connection, 3)


def cut_the_newest_events(connection):
    connection.execute(text("DELETE FROM audit_events WHERE id > 4"))


def append_events_of_their_own(connection):
    # No trigger stands in the way of an INSERT: the app's own role may append.
    last = connection.execute(select(EVENTS.c.hash).order_by(EVENTS.c.id.desc()).limit(1)).scalar()
    fields = dict(at=datetime.now(UTC), actor="acme_reviewer_2 (reviewer@acme)",
                  action="promotion.approved", subject="pool/chat/acme/evil@1", tenant_id=None,
                  before=None, after={"comment": "fine"})
    connection.execute(insert(EVENTS).values(**fields, prev_hash=last, hash=event_hash(last, **fields)))


REWRITTEN = "no longer has the hash the head recorded outside the database at {at} holds for it: " \
            "the chain was rewritten"
# attack -> (events left, [(event id, kind, detail)]); {at} is when the head was recorded.
ATTACKS: dict[Callable, tuple[int, list[tuple[int, str, str]]]] = {
    edit_and_recompute: (6, [(6, "head_mismatch", "event 6 " + REWRITTEN)]),
    edit_and_recompute_keeping_the_keyed_label: (6, [
        *[(i, "altered", f"event {i} (demo.event thing/{i - 1}) does not match its hash: it was "
                         "edited after it was written, or keyed with a secret that is neither "
                         "LORAPLANE_SECRET_KEY nor in LORAPLANE_PREVIOUS_SECRET_KEYS here") for i in range(3, 7)],
        (6, "head_mismatch", "event 6 " + REWRITTEN)]),
    truncate_and_rebuild_longer: (8, [(6, "head_mismatch", "event 6 " + REWRITTEN)]),
    truncate_and_rebuild_shorter: (3, [(6, "head_missing", (
        "event 6, the head recorded outside the database at {at} (6 events), is not in the chain, "
        "which holds 3 events up to event 3: events were removed, or the chain was truncated and "
        "rebuilt"))]),
    cut_the_newest_events: (4, [(6, "head_missing", (
        "event 6, the head recorded outside the database at {at} (6 events), is not in the chain, "
        "which holds 4 events up to event 4: events were removed, or the chain was truncated and "
        "rebuilt"))]),
    append_events_of_their_own: (7, [(7, "unkeyed", (
        "event 7 (promotion.approved pool/chat/acme/evil@1) is hashed without the audit key after "
        "keyed events: it was written or rewritten by someone who does not hold the key"))]),
}


def problems(url: str, **options) -> list[tuple[int, str, str]]:
    engine = make_engine(url, pooled=False)
    with Session(engine) as session:
        report = verify_chain(session, **options)
    engine.dispose()
    return [(p.id, p.kind, p.detail) for p in report.problems]


@pytest.mark.parametrize("attack", list(ATTACKS), ids=lambda attack: attack.__name__)
def test_a_rewritten_chain_is_found(tampered_database, attack, tmp_path):
    url, head_file = tampered_database.url, tampered_database.head_file
    head = anchor.read(head_file)
    assert (head.last_id, head.count) == (6, 6) and run_verify(url).returncode == 0

    with as_owner_without_triggers(url) as connection:
        attack(connection)

    events, expected = ATTACKS[attack]
    expected = [(i, kind, detail.format(at=head.at)) for i, kind, detail in expected]
    assert problems(url) == expected
    result = run_verify(url)
    assert result.returncode == 1
    for i, kind, detail in expected:
        assert f"{kind} event {i}: {detail}" in said(result)
    assert f"the audit chain is broken: {len(expected)} problem(s) in {events} events" in said(result)
    if attack in (edit_and_recompute, truncate_and_rebuild_longer):
        # What the check of the chain alone (all there was before) makes of the same database.
        assert problems(url, head_file=tmp_path / "no-head-here.json") == []
    assert anchor.read(head_file) == head  # the file outside the database is as it was


def test_the_registry_does_not_move_a_head_the_chain_no_longer_holds(tampered_database):
    """New events after a rewrite must not bless the rewritten chain with a fresh head."""
    url, head_file = tampered_database.url, tampered_database.head_file
    head = anchor.read(head_file)
    with as_owner_without_triggers(url) as connection:
        edit_and_recompute(connection)

    record_events(url, ["after/0", "after/1"])

    assert anchor.read(head_file) == head
    assert [(i, kind) for i, kind, _ in problems(url)] == [(6, "head_mismatch")]
    assert run_verify(url).returncode == 1


def test_a_head_written_without_the_key_is_not_trusted(tampered_database):
    """Whoever can write the head's file, but lacks the key, cannot move it to their chain."""
    url, head_file = tampered_database.url, tampered_database.head_file
    with as_owner_without_triggers(url) as connection:
        edit_and_recompute(connection)
        last = connection.execute(select(EVENTS.c.hash).where(EVENTS.c.id == 6)).scalar()
    body = {"last_id": 6, "last_hash": last, "count": 6, "at": datetime.now(UTC).isoformat()}
    guessed = hmac.new(secrets.token_bytes(32), json.dumps(body, sort_keys=True, separators=(",", ":"))
                       .encode(), hashlib.sha256).hexdigest()
    head_file.write_text(json.dumps({**body, "signature": guessed}))

    detail = (f"the audit head at {head_file} cannot be trusted: its signature does not match this "
              "deployment's audit-head key (LORAPLANE_SECRET_KEY): it was forged or comes from "
              "another deployment")
    assert problems(url) == [(0, "head_untrusted", detail)]
    result = run_verify(url)
    assert result.returncode == 1
    assert f"head_untrusted: {detail}" in said(result)

    record_events(url, ["after/0"])
    assert json.loads(head_file.read_text())["signature"] == guessed  # kept as evidence
