"""A unit of work on an engine of the caller's own: what a registry process's `transaction()` is,
for a test or benchmark that calls services directly against a database it started (services
record audit events and announcements for the commit)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from registry.unit_of_work import UnitOfWork
from registry.work_scope import opened


@contextmanager
def unit_of_work(engine: Engine) -> Iterator[Session]:
    with opened(lambda: UnitOfWork(Session(engine, expire_on_commit=False))) as work:
        yield work.session
