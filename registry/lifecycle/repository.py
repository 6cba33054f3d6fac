"""What holds a version: the pools' aliases, retirements and signed sets, the promotions, the
evaluations and the attestations that name it."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, aliased

from registry.tables import Attestation, Evaluation, Pool, PoolAlias, PoolRetirement, Promotion


def aliases_naming(session: Session, version_ids: list[int]) -> list[tuple[int, str, str]]:
    """(version id, pool name, alias) of every alias row pointing at one of the versions."""
    query = (select(PoolAlias.version_id, Pool.name, PoolAlias.alias)
             .join(Pool, Pool.id == PoolAlias.pool_id).where(PoolAlias.version_id.in_(version_ids))
             .order_by(Pool.name, PoolAlias.alias))
    return [(row[0], row[1], row[2]) for row in session.execute(query)]


def rollback_targets_naming(session: Session, version_ids: list[int]) -> list[tuple[int, str, str]]:
    """(version id, pool name, alias) of each alias whose one-call rollback would restore one of
    the versions: the promotion before the alias's current one names it."""
    previous = aliased(Promotion)
    query = (select(previous.version_id, Pool.name, PoolAlias.alias)
             .join(Promotion, Promotion.id == PoolAlias.promotion_id)
             .join(previous, previous.id == Promotion.previous_id)
             .join(Pool, Pool.id == PoolAlias.pool_id)
             .where(previous.version_id.in_(version_ids)).order_by(Pool.name, PoolAlias.alias))
    return [(row[0], row[1], row[2]) for row in session.execute(query)]


def retirements_naming(session: Session, version_ids: list[int]) -> list[tuple[int, str]]:
    """(version id, pool name) of every pool still retiring one of the versions."""
    query = (select(PoolRetirement.version_id, Pool.name)
             .join(Pool, Pool.id == PoolRetirement.pool_id)
             .where(PoolRetirement.version_id.in_(version_ids)).order_by(Pool.name))
    return [(row[0], row[1]) for row in session.execute(query)]


def signed_sets(session: Session) -> list[tuple[str, object]]:
    """(pool name, signed active set as stored) of every pool."""
    return [(row[0], row[1]) for row in session.execute(
        select(Pool.name, Pool.signed_active_set).order_by(Pool.name))]


def promotions_naming(session: Session, version_ids: list[int], states: frozenset[str]) -> list[Promotion]:
    query = (select(Promotion).where(Promotion.version_id.in_(version_ids), Promotion.state.in_(states))
             .order_by(Promotion.id))
    return list(session.scalars(query))


def unfinished_evaluation_ids(session: Session, version_ids: list[int],
                              finished: frozenset[str]) -> list[tuple[int, int]]:
    """(version id, evaluation id) of each unfinished evaluation of the versions."""
    query = (select(Evaluation.version_id, Evaluation.id)
             .where(Evaluation.version_id.in_(version_ids), Evaluation.state.not_in(finished))
             .order_by(Evaluation.id))
    return [(row[0], row[1]) for row in session.execute(query)]


def attestations_of(session: Session, version_ids: list[int]) -> list[Attestation]:
    return list(session.scalars(select(Attestation).where(Attestation.version_id.in_(version_ids))
                                .order_by(Attestation.id)))
