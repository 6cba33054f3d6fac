"""The eval suites' queries."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from registry.pagination import fetch_page
from registry.tables import EvalSuite


def suite_exists(session: Session, name: str) -> bool:
    return session.scalar(select(EvalSuite.id).where(EvalSuite.name == name)) is not None


def find_suite(session: Session, name: str) -> EvalSuite | None:
    return session.scalar(select(EvalSuite).where(EvalSuite.name == name))


def page_of_suites(session: Session, *, limit: int, cursor: str | None,
                   tenant_id: int | None, every_tenant: bool) -> tuple[list[EvalSuite], str | None]:
    """Global suites and `tenant_id`'s, or with every_tenant all of them."""
    query = select(EvalSuite)
    if not every_tenant:
        query = query.where(EvalSuite.tenant_id.is_(None) | (EvalSuite.tenant_id == tenant_id))
    return fetch_page(session, query, EvalSuite.id, limit=limit, cursor=cursor)


def suites_of_tenant(session: Session, tenant_id: int) -> int:
    return session.execute(
        select(func.count()).select_from(EvalSuite).where(EvalSuite.tenant_id == tenant_id)).scalar_one()
