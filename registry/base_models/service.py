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
        check_alias(alias)
    repository.lock_names(session)
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


def check_alias(alias: str) -> str:
    """An alias is what adapters' configs write in base_model_name_or_path: a hub id or a path."""
    if not alias.strip() or len(alias) > 200 or not alias.isprintable():
        raise Unprocessable(f"alias {alias!r} is not valid", code="invalid_alias",
                            hint="Use 1-200 printable characters.")
    if alias.strip() in (".", ".."):  # a URL path cannot carry them: such an alias could not be removed
        raise Unprocessable(f"alias {alias!r} is not valid: it names no model", code="invalid_alias",
                            hint="Use the hub id or path adapters write in base_model_name_or_path.")
    return alias


def add_alias(session: Session, name: str, alias: str, *, actor: str) -> tuple[BaseModelOut, bool]:
    """Let adapters name the base `alias` too. Whether it was added: adding one the base already
    has changes nothing. A name another base is known by is refused (409)."""
    check_alias(alias)
    repository.lock_names(session)
    row = get(session, name)
    before = repository.aliases_of(session, row.id)
    if alias in before:
        return to_out(session, row), False
    if alias == row.name:
        raise Conflict(f"{alias!r} is already the name of base model {row.name!r}", code="alias_taken",
                       hint="Adapters may already use it in base_model_name_or_path.")
    holder = repository.by_name_or_alias(session, alias)
    if holder is not None:
        what = "the name" if holder.name == alias else "an alias"
        raise Conflict(f"{alias!r} is already {what} of base model {holder.name!r}", code="alias_taken",
                       hint="A name may point at one base only: remove it there first "
                            f"(loraplane base-model alias remove {holder.name} {alias}), if it "
                            "really names this base.")
    session.add(BaseModelAlias(alias=alias, base_model_id=row.id))
    session.flush()
    audit.record(session, actor=actor, action="base_model.alias.add", subject=f"base-model/{row.name}",
                 before={"aliases": before}, after={"aliases": sorted([*before, alias])})
    return to_out(session, row), True


def remove_alias(session: Session, name: str, alias: str, *, actor: str) -> BaseModelOut:
    """Stop accepting `alias` for the base. Versions already uploaded under it keep their base."""
    repository.lock_names(session)
    row, held = _alias_of(session, name, alias)
    before = repository.aliases_of(session, row.id)
    session.delete(held)
    session.flush()
    audit.record(session, actor=actor, action="base_model.alias.remove", subject=f"base-model/{row.name}",
                 before={"aliases": before}, after={"aliases": [a for a in before if a != held.alias]})
    return to_out(session, row)


def _alias_of(session: Session, name: str, alias: str) -> tuple[BaseModel, BaseModelAlias]:
    """The base and its alias row, named by a URL path `{name}/aliases/{alias}`. Both may hold
    '/' (hub ids, paths), so the router's split at the last '/aliases/' may be the wrong one:
    every split is tried, and one naming two different pairs is refused rather than guessed."""
    path = f"{name}/aliases/{alias}"
    found = []
    for start in range(len(path)):
        if path.startswith("/aliases/", start):
            base_name, alias_name = path[:start], path[start + len("/aliases/"):]
            base = repository.by_name(session, base_name)
            held = None if base is None else repository.alias_row(session, base.id, alias_name)
            if base is not None and held is not None:
                found.append((base, held))
    if len(found) > 1:
        raise Conflict(f"the path names {len(found)} base models' aliases", code="ambiguous_alias",
                       hint="Remove one of them with a base name and alias that hold no '/aliases/'.")
    if not found:
        get(session, name)  # 404 for a base that does not exist
        raise NotFound(f"base model {name!r} has no alias {alias!r}", code="alias_not_found",
                       hint=f"Its aliases are listed by GET /v1/base-models/{name}.")
    return found[0]


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
