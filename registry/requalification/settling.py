"""Clear marks whose versions qualified again (or left the pool), and move the pool's qualified
engine or config once a change has no mark left."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from registry import audit
from registry.active_set.repository import live_nodes
from registry.clock import aware
from registry.evaluation_policies import service as policies
from registry.evaluations import rules as evaluation_rules
from registry.requalification import repository, rules
from registry.requalification.fingerprints import engine_difference, engine_fingerprint
from registry.tables import Pool, Requalification
from registry.webhooks.service import emit

CLEARED_EVENT = "requalification.cleared"


def settle(session: Session, pool: Pool, *, config_sha256: str, actor: str) -> bool:
    """True if a mark was cleared. Looks without a lock first: most reports change nothing."""
    if not _verdicts(session, pool, repository.open_marks(session, pool.id), config_sha256):
        return False
    repository.lock_pool(session, pool)
    # Again under the lock: another registry process may have cleared them meanwhile.
    verdicts = _verdicts(session, pool, repository.open_marks(session, pool.id), config_sha256)
    if not verdicts:
        return False
    now = datetime.now(UTC)
    names = repository.names_of(session, {mark.version_id for mark, _, _ in verdicts})
    requalified: dict[int, list[str]] = defaultdict(list)
    for mark, outcome, evaluation_ids in verdicts:
        rules.clear(mark, outcome, at=now, evaluation_ids=evaluation_ids)
        name = names[mark.version_id]
        audit.record(session, actor=actor, action="requalification.clear",
                     subject=f"pool/{pool.name}/{name.served_name}", tenant_id=name.tenant_id,
                     before={"mark": mark.id, "cause": mark.cause,
                             "target_sha256": mark.target_sha256},
                     after={"outcome": outcome, "evaluations": evaluation_ids})
        if outcome == rules.REQUALIFIED:
            requalified[name.tenant_id].append(name.served_name)
    session.flush()
    for tenant_id, served in sorted(requalified.items()):
        emit(session, CLEARED_EVENT, tenant_id=tenant_id,
             data={"pool": pool.name, "versions": sorted(served)})
    for cause, target, after in _rounds(verdicts):
        if not repository.round_open(session, pool.id, cause, target):
            complete_round(session, pool, cause=cause, target_sha256=target, after=after,
                           config_sha256=config_sha256, actor=actor)
    return True


def _rounds(verdicts) -> list[tuple[str, str, dict[str, Any]]]:
    """The changes the cleared marks were for, each once."""
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for mark, _, _ in verdicts:
        seen.setdefault((mark.cause, mark.target_sha256), mark.after)
    return [(cause, target, after) for (cause, target), after in seen.items()]


def complete_round(session: Session, pool: Pool, *, cause: str, target_sha256: str,
                   after: dict[str, Any], actor: str, config_sha256: str | None = None) -> None:
    """No mark of this change is left: the pool is qualified for it."""
    now = datetime.now(UTC).isoformat()
    if cause == rules.ENGINE:
        # Engines that live nodes still run stay qualified (a rolling upgrade, a canary node), so
        # a mixed fleet does not send the pool back and forth between them.
        running = {engine_fingerprint(node.engine) for node in live_nodes(session, pool.id)
                   if node.engine}
        before = list(pool.qualified_engines or [])
        kept = [e for e in before if e["sha256"] in running and e["sha256"] != target_sha256]
        pool.qualified_engines = kept + [{**after, "since": now}]
        audit.record(session, actor=actor, action="pool.qualified_engine", subject=f"pool/{pool.name}",
                     before={"qualified_engines": before},
                     after={"qualified_engines": pool.qualified_engines})
    elif target_sha256 == config_sha256:  # a config that changed again since has a round of its own
        previous = pool.qualified_config_sha256
        pool.qualified_config_sha256 = target_sha256
        audit.record(session, actor=actor, action="pool.qualified_config", subject=f"pool/{pool.name}",
                     before={"config_sha256": previous}, after={"config_sha256": target_sha256})
    session.flush()


def _verdicts(session: Session, pool: Pool, marks: list[Requalification],
              config_sha256: str) -> list[tuple[Requalification, str, list[int] | None]]:
    """(mark, outcome, passed evaluations) for every open mark that should clear now."""
    if not marks:
        return []
    active = repository.active_version_ids(session, pool.id)
    required = policies.suites_for_versions(session, pool, {m.version_id for m in marks})
    results = repository.evaluations_of(session, set(required), policies.every_suite(required))
    verdicts: list[tuple[Requalification, str, list[int] | None]] = []
    for mark in marks:
        if mark.version_id not in active:
            verdicts.append((mark, rules.LEFT_POOL, None))
        elif mark.cause == rules.BASE_CONFIG and mark.target_sha256 != config_sha256:
            verdicts.append((mark, rules.SUPERSEDED, None))
        else:
            passed = _passed_since(mark, results, required[mark.version_id])
            if passed is not None:
                verdicts.append((mark, rules.REQUALIFIED, passed))
    return verdicts


def _passed_since(mark: Requalification, results: list[repository.SuiteResult],
                  suites: list[str]) -> list[int] | None:
    """The latest passed evaluation of each required suite finished after the mark, or None
    while a suite has none. For a new engine, only an evaluation that ran on that engine counts."""
    marked_at = aware(mark.marked_at)
    latest: dict[str, int] = {}
    for result in results:
        if (result.version_id == mark.version_id and result.state == evaluation_rules.PASSED
                and result.finished_at is not None and aware(result.finished_at) > marked_at
                and (mark.cause != rules.ENGINE or engine_difference(result.engine, mark.after) is None)):
            latest[result.suite] = result.evaluation_id
    if any(suite not in latest for suite in suites):
        return None
    return [latest[suite] for suite in suites]
