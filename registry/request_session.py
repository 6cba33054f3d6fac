"""One unit of work per request, shared by the token check and the route: committed when the
route returns, rolled back when it raises.

The commit happens before the response is sent (`scope="function"`): a client that gets a 201
can read what it made at once, and an error at the commit (the audit seal, a signature) is
answered instead of a success. The unit comes from the app's `begin_work` (app.py), which wakes
this process's long-polls after each commit; see registry/unit_of_work.py for what the commit runs.

An endpoint that waits on something slow (an upload's body, a long poll) must not hold a
transaction or a pooled connection while it waits: it commits what it did so far first
(`commit_so_far`), and opens the units of work it needs itself (`work_factory`).
"""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from registry.work_scope import BeginWork, opened

_SCOPE_KEY = "loraplane.unit_of_work"


def work_factory(request: Request) -> BeginWork:
    """How this app opens a unit of work (`UnitOfWork.begin`, with its long-polls to wake)."""
    return request.app.state.begin_work


def _request_session(request: Request) -> Iterator[Session]:
    with opened(work_factory(request)) as work:
        request.scope[_SCOPE_KEY] = work
        yield work.session


# Every route and dependency takes this one dependency, so FastAPI hands them the same session.
RequestSession = Depends(_request_session, scope="function")


def session_of(request: Request) -> Session:
    """The request's session, for code that runs outside the dependencies (an error page)."""
    return request.scope[_SCOPE_KEY].session


def discard(request: Request) -> None:
    """Roll back what the request did so far, when a route answers an error without raising it
    (a dashboard page that shows the error): the commit would otherwise keep it."""
    work = request.scope.get(_SCOPE_KEY)
    if work is not None:
        work.rollback()


def commit_so_far(request: Request) -> None:
    """Commit what the request did so far, and end its transaction: before a slow wait (an
    upload's body) that must hold no lock or pooled connection."""
    request.scope[_SCOPE_KEY].commit()
