"""Where a registry LISTENs for other replicas' commits: the direct URL when one is given, never
through PgBouncer in transaction mode (it hands the listening server connection to other
clients), and the settings that describe the database refuse what cannot work."""

from __future__ import annotations

import logging

import pytest
from pydantic import ValidationError
from sqlalchemy import event

from registry.active_set.long_poll import watch
from registry.db import make_engine
from registry.settings import RegistrySettings

pytestmark = pytest.mark.fast

BOUNCER = "postgresql+psycopg://loraplane@pgbouncer:6432/loraplane"
DIRECT = "postgresql+psycopg://loraplane@postgres:5432/loraplane"


def use(monkeypatch, **values) -> None:
    settings = RegistrySettings(**values)
    monkeypatch.setattr(watch, "get_settings", lambda: settings)
    monkeypatch.setattr(watch, "get_engine", lambda: make_engine(settings.database_url,
                                                                 pgbouncer=settings.database_pgbouncer))


def test_the_listen_url_is_used_when_given(monkeypatch):
    use(monkeypatch, database_url=BOUNCER, database_pgbouncer=True, database_listen_url=DIRECT)
    assert watch.listen_url().render_as_string(hide_password=False) == DIRECT


def test_a_direct_database_url_is_listened_on(monkeypatch):
    use(monkeypatch, database_url=DIRECT)
    assert watch.listen_url().render_as_string(hide_password=False) == DIRECT


def test_behind_pgbouncer_without_a_listen_url_the_poll_wakes_long_polls_and_says_so(monkeypatch, caplog):
    use(monkeypatch, database_url=BOUNCER, database_pgbouncer=True, active_set_poll_s=2)
    with caplog.at_level(logging.WARNING, logger=watch.__name__):
        assert watch.listen_url() is None
    assert "LORAPLANE_DATABASE_LISTEN_URL is unset" in caplog.text and "every 2.0 s" in caplog.text


def test_sqlite_listens_nowhere(monkeypatch, tmp_path):
    use(monkeypatch, database_url=f"sqlite:///{tmp_path / 'db'}")
    assert watch.listen_url() is None


def test_pgbouncer_engines_prepare_no_statements_and_pool_as_configured():
    engine = make_engine(BOUNCER, pool_size=3, max_overflow=4, pgbouncer=True)
    assert engine.pool.size() == 3 and engine.pool._max_overflow == 4  # type: ignore[attr-defined]
    asked: dict = {}

    def connecting(_dialect, _record, _args, params) -> None:
        asked.update(params)
        raise ConnectionRefusedError("nothing to connect to here")

    event.listen(engine, "do_connect", connecting)
    with pytest.raises(Exception, match="nothing to connect to"):
        engine.connect()
    assert "prepare_threshold" in asked and asked["prepare_threshold"] is None


@pytest.mark.parametrize(("values", "message"), [
    ({"database_url": "sqlite:////tmp/x.db", "database_pgbouncer": True}, "PgBouncer pools PostgreSQL"),
    ({"database_url": BOUNCER, "database_listen_url": "mysql://x"}, "LORAPLANE_DATABASE_LISTEN_URL must be"),
    ({"database_url": BOUNCER, "database_pool_size": 0}, "database_pool_size"),
])
def test_database_settings_that_cannot_work_are_refused(values, message):
    with pytest.raises(ValidationError, match=message):
        RegistrySettings(**values)
