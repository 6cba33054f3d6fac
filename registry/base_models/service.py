"""Base models: registered from config.json, so the registry knows every module a LoRA may
target, with its shape, from the architecture itself (module_table.py)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from registry import audit
from registry.base_models import config_checks, repository, stored_tables
from registry.base_models.schemas import BaseModelCreate, BaseModelOut, ModuleOut
from registry.errors import Conflict, NotFound, Unprocessable
from registry.tables import BaseModel, BaseModelAlias


def register(session: Session, spec: BaseModelCreate, *, actor: str) -> BaseModelOut:
    config_checks.check(spec.config)
    aliases = sorted(set(spec.aliases) - {spec.name})
    for alias in aliases:
        if not alias.strip() or len(alias) > 200 or not alias.isprintable():
            raise Unprocessable(f"alias {alias!r} is not valid", code="invalid_alias",
                                hint="Use 1-200 printable characters.")
    taken = repository.name_taken(session, [spec.name, *aliases])
    if taken is not None:
        raise Conflict(f"base model name {taken!r} is already registered", code="already_exists",
                       hint="Pick another name, or use the registered base.")
    table = stored_tables.table_for_config(session, spec.config)
    row = BaseModel(name=spec.name, config=spec.config, architecture=spec.config["architectures"][0],
                    hidden_size=table.hidden_size, num_layers=table.num_layers,
                    vocab_size=table.vocab_size)
    session.add(row)
    session.flush()
    session.add_all(BaseModelAlias(alias=alias, base_model_id=row.id) for alias in aliases)
    session.flush()
    return audit.record_created(session, to_out(session, row), actor=actor,
                                action="base_model.register", subject=f"base-model/{row.name}")


def get(session: Session, name: str) -> BaseModel:
    row = repository.by_name(session, name)
    if row is None:
        raise NotFound(f"base model {name!r} does not exist", code="base_model_not_found",
                       hint="List them with GET /v1/base-models.")
    return row


def list_page(session: Session, *, limit: int, cursor: str | None) -> tuple[list[BaseModelOut], str | None]:
    rows, next_cursor = repository.page_of_base_models(session, limit=limit, cursor=cursor)
    return [to_out(session, row) for row in rows], next_cursor


def to_out(session: Session, row: BaseModel) -> BaseModelOut:
    table = stored_tables.table_of(session, row)
    return BaseModelOut(
        name=row.name, aliases=repository.aliases_of(session, row.id), architecture=row.architecture,
        hidden_size=row.hidden_size, num_layers=row.num_layers, vocab_size=row.vocab_size,
        tied_embeddings=table.tied_embeddings, transformers=table.transformers,
        modules=[ModuleOut(name=entry.name, kind=entry.kind, in_features=entry.in_features,
                           out_features=entry.out_features, experts=entry.experts,
                           layers=len(entry.layers)) for entry in table.modules],
        created_at=row.created_at,
    )
