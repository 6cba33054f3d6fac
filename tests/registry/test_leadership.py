"""On the embedded default (SQLite, one machine) there is one housekeeper: it leads at once, and a
webhook's send holds no transaction, which there would hold the database's write lock for the
send. Several processes on Postgres: tests/registry/test_replicas.py."""

from __future__ import annotations

import pytest

from registry.db import make_engine
from registry.leadership import service
from registry.leadership.service import Leadership

pytestmark = pytest.mark.fast


@pytest.fixture
def sqlite(monkeypatch, tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'loraplane.db'}")
    monkeypatch.setattr(service, "get_engine", lambda: engine)
    monkeypatch.setattr(service, "plain_transaction", lambda: pytest.fail("no transaction on SQLite"))
    return engine


def test_the_one_housekeeper_of_the_embedded_default_leads_at_once(sqlite):
    changes = []
    leadership = Leadership("housekeeping", 1, check_s=0.1, on_change=changes.append)
    leadership.start()
    leadership.wait_to_lead()
    assert leadership.leading and changes == [True]
    leadership.stop()


def test_a_send_on_the_embedded_default_holds_no_transaction(sqlite):
    with service.sending(7) as alone:
        assert alone
