"""Re-qualification's entry points. A node's report (or a change to a base's config) may mark
every active version of a pool; marks clear as the versions pass the pool's required suites
again; under the `suspend` policy, marked versions leave the active set meanwhile."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from registry import audit
from registry.active_set.writing.change import new_generation
from registry.pool_lookup import pool_by_name
from registry.active_set.reading.suspension import SUSPEND, suspended_version_ids
from registry.auth.principal import Principal
from registry.clock import aware
from registry.evaluation_policies import service as policies
from registry.evaluations import rules as evaluation_rules
from registry.requalification import confirmation, marking, repository, settling
from registry.base_models.stored_tables import config_digest
from registry.requalification.fingerprints import engine_record
from registry.requalification.reasons import public_change, reason_text
from registry.requalification.rules import BASE_CONFIG, ENGINE
from registry.requalification.schemas import (
    EngineOut, MarkOut, PendingEngineOut, RequalificationsOut, SuiteProgress, VersionMarkOut,
)
from registry.rows import existing
from registry.tables import BaseModel, Pool, Requalification

SETTLE_ACTOR = "system (re-qualification)"
CONFIG_ACTOR = "system (re-qualification: the base model's config changed)"


def observe_report(session: Session, pool: Pool, node_id: str, engine: dict[str, Any] | None) -> None:
    """After a node's report is stored, in its transaction: mark on a new engine once it is
    confirmed (confirmation.py) or on a new base config, clear what qualified since."""
    _observe(session, pool, engine=engine, engine_actor=f"node {node_id} reported its engine")


def declare_engine(session: Session, principal: Principal, pool_name: str,
                   engine: dict[str, Any]) -> RequalificationsOut:
    """An operator declares the engine the pool's nodes run now (or are about to): a node that
    reports it starts the round, without waiting for a quorum."""
    principal.require_global_admin()
    pool = pool_by_name(session, pool_name)
    repository.lock_pool(session, pool)
    record = engine_record(engine)
    if record["sha256"] not in (pool.declared_engines or []):
        before = list(pool.declared_engines or [])
        pool.declared_engines = [*before, record["sha256"]]
        audit.record(session, actor=principal.label, action="pool.engine_declared",
                     subject=f"pool/{pool.name}", before={"declared_engines": before},
                     after={"declared_engines": pool.declared_engines, "engine": record})
        session.flush()
    reported = confirmation.reporters(session, pool).get(record["sha256"])
    if reported is not None:  # a live node runs it already: the round starts now
        _observe(session, pool, engine=reported.engine,
                 engine_actor=f"node {reported.nodes[0]} reported it")
    return listing(session, principal, pool_name)


def observe_base_model(session: Session, base_model_id: int) -> None:
    """Call after a base's config changed: every pool on it qualifies its versions again."""
    for pool in repository.pools_on_base(session, base_model_id):
        _observe(session, pool, engine=None, engine_actor=SETTLE_ACTOR)


def after_suites_changed(session: Session, pool: Pool) -> None:
    """Call once the pool's required suites changed: a mark waiting only for a suite no longer
    required clears now, not at the pool's next node report."""
    _observe(session, pool, engine=None, engine_actor=SETTLE_ACTOR)


def after_evaluation(session: Session, version_id: int) -> None:
    """Call once an evaluation's outcome is recorded: a mark it completes clears now, not at the
    pool's next node report."""
    pool_ids = {pool.id for _, pool in repository.marks_of_version(session, version_id)}
    for pool_id in sorted(pool_ids):
        _observe(session, existing(session, Pool, pool_id), engine=None, engine_actor=SETTLE_ACTOR)


def _observe(session: Session, pool: Pool, *, engine: dict[str, Any] | None,
             engine_actor: str) -> None:
    suspended = suspended_version_ids(session, pool.id) if pool.requalify_policy == SUSPEND else set()
    config = config_digest(existing(session, BaseModel, pool.base_model_id).config)
    changed = _engine_changed(session, pool, engine, engine_actor) if engine is not None else False
    changed = _config_changed(session, pool, config) or changed
    # After marking, so that a pool without required suites clears at once.
    changed = settling.settle(session, pool, config_sha256=config, actor=SETTLE_ACTOR) or changed
    if changed and suspended_version_ids(session, pool.id) != suspended:
        new_generation(session, pool.id)  # the active set lost or regained versions


def _engine_changed(session: Session, pool: Pool, engine: dict[str, Any], reported: str) -> bool:
    record = engine_record(engine)
    if not _is_new_engine(session, pool, record["sha256"]):  # every heartbeat ends here
        return False
    repository.lock_pool(session, pool)
    if not _is_new_engine(session, pool, record["sha256"]):  # another registry process was first
        return False
    how = confirmation.confirmed_by(session, pool, record["sha256"])
    if how is None:  # pending, the pool's first engine too: listed with its reporters, marks nothing
        return False
    if not pool.qualified_engines:
        pool.qualified_engines = [{**record, "since": datetime.now(UTC).isoformat()}]
        audit.record(session, actor=f"system (re-qualification: the first engine {how}; {reported})",
                     action="pool.qualified_engine", subject=f"pool/{pool.name}",
                     before={"qualified_engines": []},
                     after={"qualified_engines": pool.qualified_engines})
        session.flush()
        return False
    actor = f"system (re-qualification: a new engine {how}; {reported})"
    before = {k: v for k, v in pool.qualified_engines[-1].items() if k != "since"}
    marks = marking.start_round(session, pool, cause=ENGINE, target_sha256=record["sha256"],
                                before=before, after=record, actor=actor)
    if not marks:  # nothing serves: nothing to evaluate again
        settling.complete_round(session, pool, cause=ENGINE, target_sha256=record["sha256"],
                                after=record, actor=actor)
    return bool(marks)


def _is_new_engine(session: Session, pool: Pool, fingerprint: str) -> bool:
    return (all(e["sha256"] != fingerprint for e in pool.qualified_engines or [])
            and not repository.round_open(session, pool.id, ENGINE, fingerprint))


def _config_changed(session: Session, pool: Pool, config: str) -> bool:
    if not _is_new_config(session, pool, config):
        return False
    repository.lock_pool(session, pool)
    if not _is_new_config(session, pool, config):
        return False
    if pool.qualified_config_sha256 is None:  # a pool from before re-qualification existed
        pool.qualified_config_sha256 = config
        audit.record(session, actor=CONFIG_ACTOR, action="pool.qualified_config",
                     subject=f"pool/{pool.name}", before={"config_sha256": None},
                     after={"config_sha256": config})
        session.flush()
        return False
    before, after = {"config_sha256": pool.qualified_config_sha256}, {"config_sha256": config}
    marks = marking.start_round(session, pool, cause=BASE_CONFIG, target_sha256=config,
                                before=before, after=after, actor=CONFIG_ACTOR)
    if not marks:
        settling.complete_round(session, pool, cause=BASE_CONFIG, target_sha256=config, after=after,
                                config_sha256=config, actor=CONFIG_ACTOR)
    return bool(marks)


def _is_new_config(session: Session, pool: Pool, config: str) -> bool:
    return (pool.qualified_config_sha256 != config
            and not repository.round_open(session, pool.id, BASE_CONFIG, config))


def listing(session: Session, principal: Principal, pool_name: str) -> RequalificationsOut:
    """The pool's open marks; a tenant's people see their own tenant's versions only."""
    principal.require_pool_viewer(pool_name)
    pool = pool_by_name(session, pool_name)
    internals = principal.tenant is None
    marks = repository.open_marks(session, pool.id)
    names = repository.names_of(session, {m.version_id for m in marks})
    shown = [m for m in marks if internals or names[m.version_id].tenant == principal.tenant]
    engines = [_engine_out(e, internals) for e in pool.qualified_engines or []]
    return RequalificationsOut(
        pool=pool.name, policy=pool.requalify_policy,
        qualified_engine=engines[-1] if engines else None, also_qualified=engines[:-1],
        qualified_config_sha256=pool.qualified_config_sha256,
        base_config_sha256=config_digest(existing(session, BaseModel, pool.base_model_id).config),
        declared_engines=list(pool.declared_engines or []),
        pending_engines=[PendingEngineOut(**_engine_out(p.engine, internals).model_dump(), nodes=p.nodes,
                                          nodes_needed=p.needed)
                         for p in confirmation.pending(session, pool)] if internals else [],
        marks=_marks_out(session, pool, shown, names, internals))


def marks_of_version(session: Session, principal: Principal, version_id: int) -> list[VersionMarkOut]:
    """A version's open marks in every pool, for whoever may already see the version."""
    found = repository.marks_of_version(session, version_id)
    names = repository.names_of(session, {version_id})
    out = []
    for mark, pool in found:
        (shown,) = _marks_out(session, pool, [mark], names, principal.tenant is None)
        out.append(VersionMarkOut(**shown.model_dump(), pool=pool.name, policy=pool.requalify_policy))
    return out


def _marks_out(session: Session, pool: Pool, marks: list[Requalification],
               names: dict[int, repository.VersionName], internals: bool) -> list[MarkOut]:
    required = policies.suites_for_versions(session, pool, {m.version_id for m in marks})
    results = repository.evaluations_of(session, set(required), policies.every_suite(required))
    suspended = suspended_version_ids(session, pool.id)
    out = []
    for mark in marks:
        name = names[mark.version_id]
        out.append(MarkOut(
            served_name=name.served_name, tenant=name.tenant, adapter=name.adapter,
            version=name.number, cause=mark.cause,
            reason=reason_text(mark.cause, mark.before, mark.after),
            change=public_change(mark.cause, mark.before, mark.after, with_flags=internals),
            marked_by=mark.marked_by, marked_at=mark.marked_at,
            suspended=mark.version_id in suspended,
            suites=[_progress(mark, suite, results) for suite in required[mark.version_id]]))
    return out


def _progress(mark: Requalification, suite: str,
              results: list[repository.SuiteResult]) -> SuiteProgress:
    mine = [r for r in results if r.version_id == mark.version_id and r.suite == suite]
    if not mine:
        return SuiteProgress(suite=suite, evaluation_id=None, state=None, counts=False)
    latest = mine[-1]
    counts = (latest.state == evaluation_rules.PASSED and latest.finished_at is not None
              and aware(latest.finished_at) > aware(mark.marked_at))
    return SuiteProgress(suite=suite, evaluation_id=latest.evaluation_id, state=latest.state,
                         counts=counts)


def _engine_out(record: dict[str, Any], internals: bool) -> EngineOut:
    return EngineOut(sha256=record["sha256"], vllm_version=record.get("vllm_version"),
                     dtype=record.get("dtype"), flags=record.get("flags") if internals else None,
                     since=record.get("since"))
