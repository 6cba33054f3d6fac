"""How a unit of work is used: committed when its block succeeds, rolled back when it raises,
and closed either way.

Domain packages open units through this protocol and a factory they are handed (the app's
`begin_work`): unit_of_work.py imports the packages whose commit steps it runs, so none of them
may import it back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from sqlalchemy.orm import Session


class Work(Protocol):
    session: Session

    def commit(self) -> None: ...
    def rollback(self) -> None: ...
    def close(self) -> None: ...


BeginWork = Callable[[], Work]


@contextmanager
def opened(begin: BeginWork) -> Iterator[Work]:
    work = begin()
    try:
        yield work
        work.commit()
    except BaseException:
        work.rollback()
        raise
    finally:
        work.close()
