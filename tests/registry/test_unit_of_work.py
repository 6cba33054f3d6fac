"""The unit of work (registry/unit_of_work.py) on Postgres: its commit runs its steps in order,
a failure after the commit leaves the commit standing, and work it cannot finish is refused
before anything is written."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from registry import audit, pending_work
from registry.active_set.writing.change import ActiveSetChange
from registry.db import plain_transaction
from registry.tables import AuditEvent, Pool
from registry.unit_of_work import UnfinishedChange, UnitOfWork
from tests.conftest import SERVING_POOL


def _generation(engine) -> int:
    with Session(engine) as session:
        return session.scalar(select(Pool.generation).where(Pool.name == SERVING_POOL))


def _events(engine, action: str) -> list[AuditEvent]:
    with Session(engine) as session:
        return list(session.scalars(select(AuditEvent).where(AuditEvent.action == action)))


def test_the_commit_seals_first_commits_then_wakes_with_what_it_committed(engine, tokens):
    woken = []

    def wake(message):  # runs after the commit: a new session already reads the sealed event
        woken.append((message, [e.hash for e in _events(engine, "unit.ordered")]))

    work = UnitOfWork(Session(engine), wake=wake)
    event = audit.record(work.session, actor="tests", action="unit.ordered", subject="unit/1")
    pending_work.of(work.session).announcements.append({"kind": "probe"})
    assert "sealed_hash" not in event
    work.commit()
    work.close()
    assert woken == [({"kind": "probe"}, [event["sealed_hash"]])]


def test_a_step_that_fails_after_the_commit_leaves_the_commit_standing(engine, tokens, caplog):
    def wake(_message):
        raise ConnectionError("the long-polls' loop is gone")

    work = UnitOfWork(Session(engine), wake=wake)
    audit.record(work.session, actor="tests", action="unit.after_commit_fails", subject="unit/2")
    pending_work.of(work.session).announcements.append({"kind": "probe"})
    work.commit()  # does not raise
    work.close()
    assert len(_events(engine, "unit.after_commit_fails")) == 1
    assert "after the commit, wake long-polls failed" in caplog.text


def test_an_active_set_change_begun_and_not_finished_is_refused_and_nothing_is_written(engine, tokens):
    before = _generation(engine)
    work = UnitOfWork(Session(engine))
    pool_id = work.session.scalar(select(Pool.id).where(Pool.name == SERVING_POOL))
    ActiveSetChange.begin(work.session, pool_id)
    audit.record(work.session, actor="tests", action="unit.unfinished", subject="unit/3")
    with pytest.raises(UnfinishedChange, match=rf"pools \[{pool_id}\] were begun and not finished"):
        work.commit()
    work.rollback()
    work.close()
    assert _generation(engine) == before
    assert _events(engine, "unit.unfinished") == []


def test_a_rollback_forgets_what_the_unit_recorded(engine, tokens):
    work = UnitOfWork(Session(engine))
    audit.record(work.session, actor="tests", action="unit.rolled_back", subject="unit/4")
    work.rollback()
    audit.record(work.session, actor="tests", action="unit.kept", subject="unit/4")
    work.commit()
    work.close()
    assert _events(engine, "unit.rolled_back") == []
    assert len(_events(engine, "unit.kept")) == 1


def test_a_change_recorded_outside_a_unit_of_work_is_refused_at_once(engine):
    with plain_transaction() as session, pytest.raises(pending_work.NoUnitOfWork) as refused:
        audit.record(session, actor="tests", action="unit.outside", subject="unit/5")
    assert "open the session with registry.unit_of_work.transaction()" in str(refused.value)
    assert _events(engine, "unit.outside") == []
