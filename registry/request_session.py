"""One database session per request, shared by the token check and the route: committed when the
route returns, rolled back when it raises.

The commit happens before the response is sent (`scope="function"`): a client that gets a 201
can read what it made at once, and an error at the commit (a before-commit check, the audit seal)
is answered instead of a success. Audit sealing and `after_commit` work run at that commit, as
they do for every `transaction()`.

An endpoint that waits on something slow (an upload's body, a long poll) must not hold a
transaction or a pooled connection while it waits: it ends the transaction before waiting
(`session.commit()`; the session begins a new one when used again), or takes no session at all.
"""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from registry.db import new_session

_SCOPE_KEY = "loraplane.session"


def _request_session(request: Request) -> Iterator[Session]:
    with new_session() as session:
        request.scope[_SCOPE_KEY] = session
        try:
            yield session
        except BaseException:
            session.rollback()
            raise
        session.commit()


# Every route and dependency takes this one dependency, so FastAPI hands them the same session.
RequestSession = Depends(_request_session, scope="function")


def session_of(request: Request) -> Session:
    """The request's session, for code that runs outside the dependencies (an error page)."""
    return request.scope[_SCOPE_KEY]


def discard(request: Request) -> None:
    """Roll back what the request did so far, when a route answers an error without raising it
    (a dashboard page that shows the error): the commit would otherwise keep it."""
    session = request.scope.get(_SCOPE_KEY)
    if session is not None:
        session.rollback()
