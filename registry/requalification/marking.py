"""Mark every active version of a pool for re-qualification after a change, and request its
evaluations the way a new upload's are requested (the evaluation service sends their tasks after
the commit)."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from registry import audit
from registry.eval_suites import service as suites
from registry.evaluation_policies import service as policies
from registry.evaluations import repository as evaluations_repository
from registry.evaluations import rules as evaluation_rules
from registry.evaluations import service as evaluations
from registry.requalification import repository
from registry.requalification.reasons import public_change
from registry.rows import existing
from registry.tables import Adapter, AdapterVersion, EvalSuite, Evaluation, Pool, Requalification
from registry.webhooks.service import emit

MARKED_EVENT = "requalification.required"


def start_round(session: Session, pool: Pool, *, cause: str, target_sha256: str,
                before: dict[str, Any] | None, after: dict[str, Any],
                actor: str) -> list[Requalification]:
    """Call with the pool's lock held. Returns the marks made (none when nothing serves)."""
    version_ids = repository.active_version_ids(session, pool.id) - _marked(session, pool.id, cause,
                                                                          target_sha256)
    names = repository.names_of(session, version_ids)
    now = datetime.now(UTC)
    marks = []
    for version_id in sorted(version_ids):
        version = existing(session, AdapterVersion, version_id)
        evaluation_ids = _request_suites(session, pool, version, names[version_id], actor=actor)
        mark = Requalification(pool_id=pool.id, version_id=version_id, cause=cause,
                               target_sha256=target_sha256, before=before, after=after,
                               evaluation_ids=evaluation_ids, marked_by=actor, marked_at=now)
        session.add(mark)
        marks.append(mark)
    session.flush()
    change = public_change(cause, before, after)
    by_tenant: dict[int, list[str]] = defaultdict(list)
    for mark in marks:
        name = names[mark.version_id]
        by_tenant[name.tenant_id].append(name.served_name)
        audit.record(session, actor=actor, action="requalification.mark",
                     subject=f"pool/{pool.name}/{name.served_name}", tenant_id=name.tenant_id,
                     before={"qualified": before},
                     after={"mark": mark.id, "cause": cause, "target_sha256": target_sha256,
                            "qualifies_for": after, "evaluations": mark.evaluation_ids,
                            "policy": pool.requalify_policy})
    for tenant_id, served in sorted(by_tenant.items()):
        # One event per tenant, so that a tenant's receivers learn only their own versions.
        emit(session, MARKED_EVENT, tenant_id=tenant_id,
             data={"pool": pool.name, "policy": pool.requalify_policy, "change": change,
                   "versions": sorted(served), "required_suites": list(pool.required_suites)})
    return marks


def _marked(session: Session, pool_id: int, cause: str, target_sha256: str) -> set[int]:
    return {m.version_id for m in repository.open_marks(session, pool_id)
            if m.cause == cause and m.target_sha256 == target_sha256}


def _request_suites(session: Session, pool: Pool, version: AdapterVersion,
                    name: repository.VersionName, *, actor: str) -> list[int]:
    """Every evaluation that will count for the mark. A passed evaluation does not stand in for
    a new one, as a plain request would have it: it ran before the change."""
    required = policies.suites_for(pool, existing(session, Adapter, version.adapter_id))
    return [fresh_evaluation(session, version, suites.get_row(session, suite_name), actor=actor,
                             context={"requalification": pool.name}).id for suite_name in required]


def fresh_evaluation(session: Session, version: AdapterVersion, suite: EvalSuite, *, actor: str,
                     context: dict) -> Evaluation:
    """One of the version's own evaluations on the suite that runs from now on: one queued and
    not yet started, or a new one (`context` adds to what its request's event says)."""
    waiting = repository.queued_evaluation(session, version.id, suite.id)
    if waiting is not None:  # a challenger's half: both halves are claimed together, so both go first
        for evaluation_id in evaluations_repository.pair_ids(session, waiting.id):
            existing(session, Evaluation, evaluation_id).priority = evaluation_rules.REQUALIFICATION
        return waiting
    return evaluations.create(session, version, suite, actor=actor, context=context,
                              priority=evaluation_rules.REQUALIFICATION)
