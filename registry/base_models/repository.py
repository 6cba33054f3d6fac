from __future__ import annotations

from typing import Any

from sqlalchemy import or_, select, text
from sqlalchemy.dialects.postgresql import insert as postgres_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from registry.pagination import fetch_page
from registry.tables import BaseModel, BaseModelAlias, ModuleTableRow

# Any constant other locks do not use: it serializes every change to the names bases are known
# by, so a registration and an alias added at once cannot both take one name.
NAMES_LOCK = 7_260_101


def lock_names(session: Session) -> None:
    """Held until the transaction ends (PostgreSQL; SQLite has one writer at a time anyway)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": NAMES_LOCK})


def by_name(session: Session, name: str) -> BaseModel | None:
    return session.scalar(select(BaseModel).where(BaseModel.name == name))


def by_name_or_alias(session: Session, name: str) -> BaseModel | None:
    alias_of = select(BaseModelAlias.base_model_id).where(BaseModelAlias.alias == name)
    return session.scalar(select(BaseModel).where(or_(BaseModel.name == name, BaseModel.id.in_(alias_of))))


def aliases_of(session: Session, base_model_id: int) -> list[str]:
    query = select(BaseModelAlias.alias).where(BaseModelAlias.base_model_id == base_model_id)
    return sorted(session.scalars(query))


def alias_row(session: Session, base_model_id: int, alias: str) -> BaseModelAlias | None:
    return session.scalar(select(BaseModelAlias).where(BaseModelAlias.base_model_id == base_model_id,
                                                       BaseModelAlias.alias == alias))


def name_taken(session: Session, names: list[str]) -> str | None:
    for name in names:
        if by_name_or_alias(session, name) is not None:
            return name
    return None


def page_of_base_models(session: Session, *, limit: int,
                        cursor: str | None) -> tuple[list[BaseModel], str | None]:
    return fetch_page(session, select(BaseModel), BaseModel.id, limit=limit, cursor=cursor)


def stored_table(session: Session, config_sha256: str) -> dict[str, Any] | None:
    row = session.get(ModuleTableRow, config_sha256)
    return None if row is None else row.table


def store_table(session: Session, config_sha256: str, table: dict[str, Any]) -> None:
    """Keep a derived table, in place of one an older registry derived; racing registrations
    store the same table."""
    insert = postgres_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    values = {"architecture": table["architecture"], "transformers": table["transformers"], "table": table}
    statement = insert(ModuleTableRow).values(config_sha256=config_sha256, **values)
    session.execute(statement.on_conflict_do_update(index_elements=["config_sha256"], set_=values))
