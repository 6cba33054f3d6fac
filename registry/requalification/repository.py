"""Queries behind re-qualification: what serves in a pool, its open marks, and the evaluations
that may clear them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import exists, select
from sqlalchemy.orm import Session

from registry.evaluations import rules as evaluation_rules
from registry.evaluations.repository import not_an_incumbent_half
from registry.tables import (
    Adapter, AdapterVersion, EvalSuite, Evaluation, NodeStatus, Pool, PoolAlias, PoolRetirement,
    Requalification, Tenant,
)


def lock_pool(session: Session, pool: Pool) -> None:
    """Take the pool row's lock (as every change to its active set does) and read it again:
    whatever another registry process decided before us is now visible, and nothing interleaves.

    FOR NO KEY UPDATE, not FOR UPDATE: a node's first report inserts its status row, whose foreign
    key holds a key-share lock on the pool row until commit, and two such reports that both asked
    FOR UPDATE would each wait for the other's key share (a deadlock). This lock still excludes
    every other writer of the row and the active set's readers, which lock it for share."""
    session.execute(select(Pool.id).where(Pool.id == pool.id).with_for_update(key_share=True))
    session.refresh(pool)


def pools_on_base(session: Session, base_model_id: int) -> list[Pool]:
    return list(session.scalars(select(Pool).where(Pool.base_model_id == base_model_id)))


def active_version_ids(session: Session, pool_id: int) -> set[int]:
    """Every version the pool's nodes hold: aliased, or retiring while traffic moves."""
    aliased = session.scalars(select(PoolAlias.version_id).where(PoolAlias.pool_id == pool_id))
    retiring = session.scalars(select(PoolRetirement.version_id)
                               .where(PoolRetirement.pool_id == pool_id))
    return set(aliased) | set(retiring)


def open_marks(session: Session, pool_id: int) -> list[Requalification]:
    return list(session.scalars(
        select(Requalification).where(Requalification.pool_id == pool_id,
                                      Requalification.cleared_at.is_(None))
        .order_by(Requalification.id).execution_options(populate_existing=True)))


def any_open(session: Session, pool_id: int) -> bool:
    return session.execute(select(exists().where(Requalification.pool_id == pool_id,
                                                 Requalification.cleared_at.is_(None)))).scalar_one()


def round_open(session: Session, pool_id: int, cause: str, target_sha256: str) -> bool:
    """A change already being qualified for: repeated reports of it mark nothing."""
    return session.execute(select(exists().where(
        Requalification.pool_id == pool_id, Requalification.cause == cause,
        Requalification.target_sha256 == target_sha256, Requalification.cleared_at.is_(None)))).scalar_one()


@dataclass(frozen=True)
class VersionName:
    served_name: str
    tenant: str
    tenant_id: int
    adapter: str
    number: int


def names_of(session: Session, version_ids: set[int]) -> dict[int, VersionName]:
    rows = session.execute(
        select(AdapterVersion.id, Tenant.name, Tenant.id, Adapter.name, AdapterVersion.number)
        .join(Adapter, Adapter.id == AdapterVersion.adapter_id)
        .join(Tenant, Tenant.id == Adapter.tenant_id)
        .where(AdapterVersion.id.in_(version_ids))).all()
    return {vid: VersionName(f"{tenant}/{adapter}@{number}", tenant, tenant_id, adapter, number)
            for vid, tenant, tenant_id, adapter, number in rows}


@dataclass(frozen=True)
class SuiteResult:
    evaluation_id: int
    version_id: int
    suite: str
    state: str
    finished_at: datetime | None
    engine: dict | None


def evaluations_of(session: Session, version_ids: set[int], suites: list[str]) -> list[SuiteResult]:
    """The versions' own evaluations against these suites, oldest first."""
    rows = session.execute(
        select(Evaluation.id, Evaluation.version_id, EvalSuite.name, Evaluation.state,
               Evaluation.finished_at, Evaluation.engine)
        .join(EvalSuite, EvalSuite.id == Evaluation.suite_id)
        .where(Evaluation.version_id.in_(version_ids), EvalSuite.name.in_(suites), not_an_incumbent_half())
        .order_by(Evaluation.id)).all()
    return [SuiteResult(*row) for row in rows]


def queued_evaluation(session: Session, version_id: int, suite_id: int) -> Evaluation | None:
    """One of its own not yet started: it will run after the change, so it can count for the mark."""
    return session.scalar(select(Evaluation).where(
        Evaluation.version_id == version_id, Evaluation.suite_id == suite_id,
        Evaluation.state == evaluation_rules.QUEUED, Evaluation.started_at.is_(None), not_an_incumbent_half())
        .order_by(Evaluation.id.desc()).limit(1))


def marks_of_version(session: Session, version_id: int) -> list[tuple[Requalification, Pool]]:
    return list(session.execute(
        select(Requalification, Pool).join(Pool, Pool.id == Requalification.pool_id)
        .where(Requalification.version_id == version_id, Requalification.cleared_at.is_(None))
        .order_by(Requalification.id)).tuples())


def live_engines(session: Session, pool_id: int, since: datetime) -> dict[str, dict | None]:
    """node id -> the engine it reported, for the pool's nodes that reported after `since`."""
    rows = session.execute(select(NodeStatus.node_id, NodeStatus.engine).where(
        NodeStatus.pool_id == pool_id, NodeStatus.reported_at >= since)).all()
    return {row.node_id: row.engine for row in rows}
