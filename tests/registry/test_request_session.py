"""The request session (registry/request_session.py), on the embedded default's SQLite: one
unit of work per request, shared by every dependency; committed before the response starts, so a
client that gets its answer can read what the request made; rolled back with the route's error."""

from __future__ import annotations

import pytest
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.orm import Session

from registry import pending_work
from registry.db import plain_transaction
from registry.errors import Conflict, LoraplaneError
from registry.request_session import RequestSession
from registry.unit_of_work import UnitOfWork

TABLE = "request_session_probe"


@pytest.fixture(autouse=True)
def probe_table() -> None:
    with plain_transaction() as session:
        session.execute(text(f"CREATE TABLE IF NOT EXISTS {TABLE} (name TEXT)"))


def _names() -> list[str]:
    with plain_transaction() as session:
        return list(session.scalars(text(f"SELECT name FROM {TABLE} ORDER BY name")))


def _add(session: Session, name: str) -> None:
    session.execute(text(f"INSERT INTO {TABLE} (name) VALUES (:name)"), {"name": name})


class AtResponseStart:
    """What a transaction of its own reads as the response starts, and what had run by then."""

    def __init__(self, app) -> None:
        self.app, self.names, self.events = app, [], []

    async def __call__(self, scope, receive, send) -> None:
        async def watched(message) -> None:
            if message["type"] == "http.response.start":
                self.names.append(_names())
                self.events.append("response started")
            await send(message)

        await self.app(scope, receive, watched)


def _app() -> tuple[FastAPI, AtResponseStart, dict]:
    app, seen = FastAPI(), {}

    def first(session: Session = RequestSession) -> Session:
        return session

    @app.post("/made/{name}", status_code=201)
    def made(name: str, early: Session = Depends(first), session: Session = RequestSession):
        seen["shared"] = early is session
        _add(session, name)
        pending_work.of(session).announcements.append({"kind": "probe"})

    @app.post("/refused/{name}")
    def refused(name: str, session: Session = RequestSession):
        _add(session, name)
        pending_work.of(session).announcements.append({"kind": "probe"})
        raise Conflict(f"{name} is refused", code="refused")

    @app.exception_handler(LoraplaneError)
    async def domain_error(_: Request, error: LoraplaneError) -> JSONResponse:
        return JSONResponse(error.body(), status_code=error.status)

    watcher = AtResponseStart(app)
    # The long-polls' wake-up is the first thing the unit of work runs after its commit.
    app.state.begin_work = lambda: UnitOfWork.begin(wake=lambda _: watcher.events.append("after commit"))
    return app, watcher, seen


def test_what_a_request_made_is_committed_before_its_answer_starts():
    app, watcher, seen = _app()
    with TestClient(watcher) as client:
        assert client.post("/made/alpha").status_code == 201
    assert seen["shared"], "every dependency of one request gets the same session"
    assert "alpha" in watcher.names[0]
    assert watcher.events == ["after commit", "response started"]


def test_a_domain_error_rolls_back_what_the_route_did_and_runs_no_after_commit_work():
    app, watcher, _ = _app()
    with TestClient(watcher) as client:
        answer = client.post("/refused/beta")
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "refused"
    assert "beta" not in _names()
    assert watcher.events == ["response started"]
