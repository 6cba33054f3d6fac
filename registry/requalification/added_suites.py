"""A suite a pool starts to require is queued at once for every version the pool already serves,
so that its reviewers learn how production fares against it before the next promotion asks."""

from __future__ import annotations

from sqlalchemy.orm import Session

from registry.eval_suites import service as suites
from registry.evaluations import repository as evaluations_repository
from registry.evaluations import rules as evaluation_rules
from registry.evaluations import service as evaluations
from registry.requalification import marking, repository
from registry.rows import existing
from registry.tables import AdapterVersion, Pool


def request_for_served_versions(session: Session, pool: Pool, added: list[str], *,
                                actor: str) -> list[int]:
    """The evaluations that will tell, one per served version and added suite: its own
    unfinished or passed one stands, as for any request; otherwise one is queued. A version
    marked to qualify again needs one that runs after its mark, as the mark's own do."""
    marked = {mark.version_id for mark in repository.open_marks(session, pool.id)}
    ids = []
    for version_id in sorted(repository.active_version_ids(session, pool.id)):
        version = existing(session, AdapterVersion, version_id)
        for name in added:
            suite = suites.get_row(session, name)
            context = {"pool_requires": pool.name}
            if version_id in marked:
                row = marking.fresh_evaluation(session, version, suite, actor=actor, context=context)
            else:
                row = (evaluations_repository.latest_unfailed(session, version.id, suite.id)
                       or evaluations.create(session, version, suite, actor=actor, context=context,
                                             priority=evaluation_rules.REQUALIFICATION))
            ids.append(row.id)
    return ids
