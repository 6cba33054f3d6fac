"""How workers take evaluations and record their outcome, safely under redelivery.

A claim is a random token plus a lease. Only the holder of an unexpired claim may record an
outcome, and recording checks the token in the same transaction, so a task delivered twice (its
worker was killed, or a retry overlapped) records exactly one result. A claim whose worker died
expires, and the next task for any evaluation on the same base takes it over.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from registry import audit
from registry.adapters import service as adapters
from registry.evaluations import repository, rules
from registry.evaluations.service import sync_version_state
from registry.rows import existing
from registry.tables import Adapter, AdapterVersion, EvalSuite, Evaluation, EvaluationExample


@dataclass(frozen=True)
class ClaimedEvaluation:
    id: int
    served_name: str
    digest: str
    files: list[dict[str, Any]]
    rank: int
    suite_id: int
    attempts: int  # claims so far, this one included
    last_reason: str | None  # why the last claim gave it back, if it did
    # What the parity reference is computed from: the upload, where the served files were
    # derived from it (fold_scaling), so that the engine is judged against what was trained.
    reference_digest: str
    reference_files: list[dict[str, Any]]
    # The incumbent's half of a comparison: only the task metrics are compared, so parity and
    # serving cost (properties of the engine, measured when it was promoted) are not measured again.
    incumbent_half: bool = False


@dataclass
class ClaimOutcome:
    """finished: nothing to do. held: another live worker has it; look again after retry_after_s.
    claimed: this worker now holds `evaluations` under `token`."""

    kind: str
    token: str | None = None
    evaluations: list[ClaimedEvaluation] = field(default_factory=list)
    retry_after_s: float = 0.0


def utcnow() -> datetime:
    return datetime.now(UTC)


def _aware(moment: datetime | None) -> datetime | None:
    # SQLite hands back naive datetimes; everything stored here is UTC.
    return moment.replace(tzinfo=UTC) if moment is not None and moment.tzinfo is None else moment


def claim_batch(session: Session, evaluation_id: int, *, max_versions: int, lease_s: float) -> ClaimOutcome:
    """Claim this evaluation (with its challenger or incumbent, always) and others waiting on the
    same base, up to max_versions versions: re-qualification's first, then the tenants' in turn
    (repository.lock_waiting_on_base)."""
    now = utcnow()
    # The pair in id order: two workers given the two halves of a pair never deadlock.
    pair = repository.lock_evaluations(session, repository.pair_ids(session, evaluation_id))
    row = next((e for e in pair if e.id == evaluation_id), None)
    if row is None or row.state in rules.FINISHED:
        return ClaimOutcome("finished")
    lease = _aware(row.lease_expires_at)
    if row.state == rules.RUNNING and lease is not None and lease > now:
        # Look again within half a lease: the holder renews it, so its remaining time says little.
        return ClaimOutcome("held", retry_after_s=min((lease - now).total_seconds() + 1, lease_s / 2))
    base_id = existing(session, EvalSuite, row.suite_id).base_model_id
    waiting = repository.lock_waiting_on_base(session, base_id, besides=row.id, now=now,
                                              limit=max_versions * 8)
    batch = [row, *(e for e in pair if e is not row and _waiting(e, now))]
    versions = {e.version_id for e in batch}
    for candidate in waiting:
        if candidate in batch or candidate.incumbent_evaluation_id or repository.challenger_of(
                session, candidate.id):
            continue  # a pair's halves are claimed only together, by the task of one of them
        if candidate.version_id in versions or len(versions) < max_versions:
            versions.add(candidate.version_id)
            batch.append(candidate)
    token = str(uuid.uuid4())
    for evaluation in batch:
        rules.transition(evaluation, rules.RUNNING)
        evaluation.claim_token = token
        evaluation.lease_expires_at = now + timedelta(seconds=lease_s)
        evaluation.attempts += 1
        evaluation.started_at = evaluation.started_at or now
    session.flush()
    return ClaimOutcome("claimed", token=token, evaluations=[_claimed(session, e) for e in batch])


def _waiting(row: Evaluation, now: datetime) -> bool:
    """Nobody works on it: queued, or running under a lease that has expired."""
    lease = _aware(row.lease_expires_at)
    return row.state == rules.QUEUED or (row.state == rules.RUNNING and lease is not None and lease < now)


def _claimed(session: Session, row: Evaluation) -> ClaimedEvaluation:
    version = existing(session, AdapterVersion, row.version_id)
    out = adapters.version_out(session, version)
    upload = version.derived_from or {"digest": version.digest, "files": version.files}
    return ClaimedEvaluation(id=row.id, served_name=out.served_name, digest=version.digest,
                             files=version.files, rank=version.rank, suite_id=row.suite_id,
                             attempts=row.attempts, last_reason=row.reason,
                             reference_digest=upload["digest"], reference_files=upload["files"],
                             incumbent_half=repository.challenger_of(session, row.id) is not None)


def renew(session: Session, token: str, ids: list[int], *, lease_s: float) -> int:
    """Extend the lease; returns how many evaluations this claim still holds."""
    held = repository.lock_held(session, token, ids)
    for evaluation in held:
        evaluation.lease_expires_at = utcnow() + timedelta(seconds=lease_s)
    return len(held)


def release(session: Session, token: str, ids: list[int], *, reason: str) -> int:
    """Give the evaluations back to the queue, e.g. while the engine is unavailable."""
    held = repository.lock_held(session, token, ids)
    for evaluation in held:
        rules.transition(evaluation, rules.QUEUED)
        evaluation.claim_token = None
        evaluation.lease_expires_at = None
        evaluation.reason = reason
    return len(held)


def attempts_of(session: Session, evaluation_id: int) -> int:
    return repository.attempts_of(session, evaluation_id) or 0


@dataclass(frozen=True)
class Outcome:
    passed: bool
    reason: str | None
    failing_metrics: list[str]
    metrics: dict[str, Any]
    engine: dict[str, Any] | None
    timings: dict[str, Any] | None
    examples: list[dict[str, Any]]
    # The version digest whose bytes the worker verified and loaded; sealed into the outcome's
    # audit event, which an approval's attestation must agree with (attestations/evaluated.py).
    digest: str | None = None


def record(session: Session, token: str, evaluation_id: int, outcome: Outcome, *,
           after_outcome: Callable[[Session, int], None]) -> bool:
    """Write the outcome if this claim still holds the evaluation; False means another worker
    took it over (this one was too slow), and nothing was written. `after_outcome(session,
    version_id)` runs once the outcome is written: the caller passes re-qualification's, since a
    mark may clear with this result and re-qualification builds on evaluations, not under them."""
    held = repository.lock_held(session, token, [evaluation_id])
    if not held:
        return False
    evaluation = held[0]
    rules.transition(evaluation, rules.PASSED if outcome.passed else rules.FAILED)
    evaluation.reason = outcome.reason
    evaluation.failing_metrics = outcome.failing_metrics
    evaluation.metrics = outcome.metrics
    evaluation.engine = outcome.engine
    evaluation.timings = outcome.timings
    evaluation.claim_token = None
    evaluation.lease_expires_at = None
    evaluation.finished_at = utcnow()
    session.add_all(EvaluationExample(evaluation_id=evaluation.id, position=position, **example)
                    for position, example in enumerate(outcome.examples))
    version = existing(session, AdapterVersion, evaluation.version_id)
    sync_version_state(session, version)
    after_outcome(session, version.id)
    audit.record(session, actor="worker", action=f"evaluation.{evaluation.state}",
                 subject=adapters.version_out(session, version).served_name,
                 tenant_id=existing(session, Adapter, version.adapter_id).tenant_id,
                 after={"evaluation": evaluation.id, "failing_metrics": outcome.failing_metrics,
                        "reason": outcome.reason, "digest": outcome.digest})
    session.flush()
    return True


def stale_ids(session: Session, *, base_model: str) -> list[int]:
    """Evaluations on this base nobody is working on: queued, or running under an expired lease."""
    return repository.stale_ids(session, base_model, now=utcnow())
