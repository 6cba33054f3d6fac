"""The eval suites' queries."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from registry.pagination import fetch_page
from registry.tables import EvalSuite


def suite_exists(session: Session, name: str) -> bool:
    return session.scalar(select(EvalSuite.id).where(EvalSuite.name == name)) is not None


def find_suite(session: Session, name: str) -> EvalSuite | None:
    return session.scalar(select(EvalSuite).where(EvalSuite.name == name))


def page_of_suites(session: Session, *, limit: int,
                   cursor: str | None) -> tuple[list[EvalSuite], str | None]:
    return fetch_page(session, select(EvalSuite), EvalSuite.id, limit=limit, cursor=cursor)
