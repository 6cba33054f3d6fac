"""Which failures are worth another attempt, and how to say why one is not.

Only a fault outside the evaluation goes away by waiting: the engine or the store is away, or the
database connection dropped. Those are retried with backoff, a bounded number of times. Anything
else (a dataset that cannot be read, a row that fails validation, an error in the worker's own
code) gives the same answer on every attempt, so the evaluation fails at once with the reason.
"""

from __future__ import annotations

from sqlalchemy import exc as db

from registry.errors import LoraplaneError, Unavailable
from workers.evaluation.engine import EngineUnavailable

TRANSIENT = (EngineUnavailable, Unavailable, db.OperationalError, db.InterfaceError,
             db.DisconnectionError, db.TimeoutError)
MAX_REASON = 1000


def is_transient(error: BaseException) -> bool:
    if isinstance(error, db.DBAPIError) and error.connection_invalidated:
        return True
    return isinstance(error, TRANSIENT)


def transient_reason(error: BaseException) -> str:
    """Why another attempt is coming; a database error's own text holds SQL, not a reason."""
    if isinstance(error, db.DBAPIError):
        return f"the database failed ({type(error.orig or error).__name__})"
    if isinstance(error, db.SQLAlchemyError):
        return f"the database failed ({type(error).__name__})"
    return _bounded(str(error))


def reason_for(error: BaseException) -> str:
    """What to record on an evaluation that cannot succeed: the domain error's own words and
    hint, or for anything unforeseen its type and message."""
    if isinstance(error, LoraplaneError):
        text = f"{error.message}. {error.hint}" if error.hint else error.message
    else:
        text = (f"the worker stopped on an unexpected error ({type(error).__name__}: {error}); "
                f"request the evaluation again, and report it with the worker's log if it recurs")
    return _bounded(text)


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_REASON else text[:MAX_REASON - 1] + "…"
