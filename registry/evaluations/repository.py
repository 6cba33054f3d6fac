"""The evaluations' queries, the claim's locks among them: a claim takes its evaluation FOR UPDATE
and the others waiting on the same base with SKIP LOCKED, so two workers never take the same one."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import case, exists, func, or_, select
from sqlalchemy.orm import Session, aliased

from registry.evaluations import rules
from registry.pagination import fetch_page
from registry.tables import (
    Adapter, AdapterVersion, BaseModel, EvalSuite, Evaluation, EvaluationExample, Pool, PoolAlias, Tenant,
)


def lock_waiting_on_base(session: Session, base_model_id: int, *, besides: int, now: datetime,
                         limit: int) -> list[Evaluation]:
    """Evaluations on this base that nobody works on (queued, or running under a lease expired
    before `now`), in the order they are claimed: re-qualification's first, then the tenants in
    turn (each one's oldest, then each one's second oldest...), so that one tenant's flood never
    holds another's behind it. `besides` (the claim's own, being claimed) takes its tenant's
    first turn. Halves of a pair are left out: they are claimed together, by one of their own
    tasks. Those another transaction has locked are skipped; ranked first, then locked, since
    Postgres locks no rows of a query with a window function, and several times `limit` are
    ranked so that two workers claiming at once both find some."""
    waiting = or_(Evaluation.state == rules.QUEUED,
                  (Evaluation.state == rules.RUNNING) & (Evaluation.lease_expires_at < now))
    challenger = aliased(Evaluation)
    mine_first = case((Evaluation.id == besides, 0), else_=1)
    turn = func.row_number().over(partition_by=(Evaluation.priority, Adapter.tenant_id),
                                  order_by=(mine_first, Evaluation.id))
    ranked = (select(Evaluation.id, Evaluation.priority, turn.label("turn"))
              .join(EvalSuite, EvalSuite.id == Evaluation.suite_id)
              .join(AdapterVersion, AdapterVersion.id == Evaluation.version_id)
              .join(Adapter, Adapter.id == AdapterVersion.adapter_id)
              .where(EvalSuite.base_model_id == base_model_id, or_(Evaluation.id == besides, waiting))
              .where(or_(Evaluation.id == besides, Evaluation.incumbent_evaluation_id.is_(None)),
                     or_(Evaluation.id == besides,
                         ~exists().where(challenger.incumbent_evaluation_id == Evaluation.id)))
              ).subquery()
    ids = [i for i in session.scalars(select(ranked.c.id).order_by(ranked.c.priority, ranked.c.turn, ranked.c.id)
                                      .limit(4 * limit + 1)) if i != besides]
    if not ids:
        return []
    locked = {row.id: row for row in session.scalars(
        select(Evaluation).where(Evaluation.id.in_(ids), waiting).with_for_update(skip_locked=True))}
    return [locked[i] for i in ids if i in locked][:limit]


def lock_held(session: Session, token: str, ids: list[int]) -> list[Evaluation]:
    """Those of `ids` still running under the claim `token`, locked."""
    return list(session.scalars(
        select(Evaluation).where(Evaluation.id.in_(ids), Evaluation.claim_token == token,
                                 Evaluation.state == rules.RUNNING)
        .order_by(Evaluation.id).with_for_update()))


def attempts_of(session: Session, evaluation_id: int) -> int | None:
    return session.scalar(select(Evaluation.attempts).where(Evaluation.id == evaluation_id))


def stale_ids(session: Session, base_model: str, *, now: datetime) -> list[int]:
    """Evaluations on this base nobody is working on: queued, or running under a lease expired
    before `now`."""
    return list(session.scalars(
        select(Evaluation.id).join(EvalSuite, EvalSuite.id == Evaluation.suite_id)
        .join(BaseModel, BaseModel.id == EvalSuite.base_model_id)
        .where(BaseModel.name == base_model, or_(
            Evaluation.state == rules.QUEUED,
            (Evaluation.state == rules.RUNNING) & (Evaluation.lease_expires_at < now)))
        .order_by(Evaluation.id)))


def not_an_incumbent_half():
    """Leaves out the incumbent's half of a comparison: it measures the task metrics only (no
    parity, no serving cost), so it is evidence for the comparison, never for the incumbent's own
    gates, attestation or re-qualification."""
    challenger = aliased(Evaluation)
    return ~exists().where(challenger.incumbent_evaluation_id == Evaluation.id)


def latest_unfailed(session: Session, version_id: int, suite_id: int) -> Evaluation | None:
    """The newest evaluation of this version on this suite that has not failed, and is its own."""
    return session.scalar(
        select(Evaluation).where(Evaluation.version_id == version_id,
                                 Evaluation.suite_id == suite_id,
                                 Evaluation.state != rules.FAILED, not_an_incumbent_half())
        .order_by(Evaluation.id.desc()).limit(1))


def states_of_version(session: Session, version_id: int) -> set[str]:
    return set(session.scalars(select(Evaluation.state).where(Evaluation.version_id == version_id)))


def page_of_examples(session: Session, evaluation_id: int, *, limit: int,
                     cursor: str | None) -> tuple[list[EvaluationExample], str | None]:
    return fetch_page(
        session, select(EvaluationExample).where(EvaluationExample.evaluation_id == evaluation_id),
        EvaluationExample.id, limit=limit, cursor=cursor)


def page_of_version(session: Session, version_id: int, *, limit: int,
                    cursor: str | None) -> tuple[list[Evaluation], str | None]:
    return fetch_page(session, select(Evaluation).where(Evaluation.version_id == version_id),
                      Evaluation.id, limit=limit, cursor=cursor)


def latest_evaluations(session: Session, version_id: int) -> dict[str, Evaluation]:
    """The version's newest evaluation of its own on each suite, by suite name."""
    rows = session.execute(
        select(EvalSuite.name, Evaluation).join(EvalSuite, EvalSuite.id == Evaluation.suite_id)
        .where(Evaluation.version_id == version_id, not_an_incumbent_half()).order_by(Evaluation.id)).all()
    return {suite: evaluation for suite, evaluation in rows}  # later rows win


def pools_on_base(session: Session, base_model_id: int) -> list[Pool]:
    return list(session.scalars(select(Pool).where(Pool.base_model_id == base_model_id)))


def pair_ids(session: Session, evaluation_id: int) -> list[int]:
    """The evaluation's id with those of its incumbent and its challenger, if it has them, in
    ascending order."""
    incumbent = session.scalar(select(Evaluation.incumbent_evaluation_id)
                               .where(Evaluation.id == evaluation_id))
    challengers = session.scalars(select(Evaluation.id)
                                  .where(Evaluation.incumbent_evaluation_id == evaluation_id))
    return sorted({evaluation_id, *challengers, *([incumbent] if incumbent else [])})


def lock_evaluations(session: Session, ids: list[int]) -> list[Evaluation]:
    """Locked in id order, and read afresh."""
    return list(session.scalars(select(Evaluation).where(Evaluation.id.in_(ids)).order_by(Evaluation.id)
                                .with_for_update().execution_options(populate_existing=True)))


def latest_unfailed_pair(session: Session, version_id: int, suite_id: int,
                         incumbent_version_id: int) -> Evaluation | None:
    """The newest challenger evaluation of this version on this suite, against an evaluation of
    that incumbent version, whose pair has not failed."""
    incumbent = aliased(Evaluation)
    return session.scalar(
        select(Evaluation).join(incumbent, incumbent.id == Evaluation.incumbent_evaluation_id)
        .where(Evaluation.version_id == version_id, Evaluation.suite_id == suite_id,
               incumbent.version_id == incumbent_version_id,
               Evaluation.state != rules.FAILED, incumbent.state != rules.FAILED)
        .order_by(Evaluation.id.desc()).limit(1))


def latest_pair(session: Session, version_id: int, suite_id: int,
                incumbent_version_id: int) -> tuple[Evaluation, Evaluation] | None:
    """(challenger, incumbent) evaluations of the newest comparison of this version with that
    incumbent version on this suite."""
    incumbent = aliased(Evaluation)
    row = session.execute(
        select(Evaluation, incumbent).join(incumbent, incumbent.id == Evaluation.incumbent_evaluation_id)
        .where(Evaluation.version_id == version_id, Evaluation.suite_id == suite_id,
               incumbent.version_id == incumbent_version_id)
        .order_by(Evaluation.id.desc()).limit(1)).first()
    return None if row is None else (row[0], row[1])


def challenger_of(session: Session, incumbent_evaluation_id: int) -> Evaluation | None:
    return session.scalar(select(Evaluation).where(
        Evaluation.incumbent_evaluation_id == incumbent_evaluation_id).limit(1))


def aliased_version_ids(session: Session, adapter_id: int, pool_ids: list[int], alias: str) -> list[int]:
    """The versions the adapter's alias points at in these pools, oldest alias first."""
    return list(dict.fromkeys(session.scalars(
        select(PoolAlias.version_id).where(PoolAlias.adapter_id == adapter_id,
                                           PoolAlias.pool_id.in_(pool_ids),
                                           PoolAlias.alias == alias)
        .order_by(PoolAlias.id))))


def lock_tenant(session: Session, tenant_id: int) -> Tenant:
    """The tenant's row under FOR UPDATE, as committed (its quota may have just changed)."""
    return session.execute(select(Tenant).where(Tenant.id == tenant_id).with_for_update()
                           .execution_options(populate_existing=True)).scalar_one()


def waiting_of_tenant(session: Session, tenant_id: int) -> int:
    """The tenant's evaluations queued or running, re-qualification's left out."""
    return session.execute(
        select(func.count()).select_from(Evaluation)
        .join(AdapterVersion, AdapterVersion.id == Evaluation.version_id)
        .join(Adapter, Adapter.id == AdapterVersion.adapter_id)
        .where(Adapter.tenant_id == tenant_id, Evaluation.state.in_((rules.QUEUED, rules.RUNNING)),
               Evaluation.priority != rules.REQUALIFICATION)).scalar_one()

