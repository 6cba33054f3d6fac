"""Request and read evaluations. Creating one also moves its version to `evaluating`, and sends
its task to a worker once the transaction commits."""

from __future__ import annotations

from sqlalchemy.orm import Session

from registry import audit, pending_work
from registry.adapters import repository as adapter_rows
from registry.adapters import rules as lifecycle
from registry.adapters import service as adapters
from registry.auth.principal import Principal, Role
from registry.errors import NotFound, Unprocessable
from registry.pool_lookup import PRODUCTION
from registry.eval_suites import service as suites
from registry.evaluation_policies import service as policies
from registry.evaluations import quotas, repository, rules
from registry.evaluations.schemas import EvaluationOut, ExampleOut, MetricResult, PairOut
from registry.pagination import Page
from registry.rows import existing
from registry.tables import Adapter, AdapterVersion, BaseModel, EvalSuite, Evaluation, Tenant

REQUESTERS = {Role.ADMIN, Role.UPLOADER, Role.REVIEWER}
READERS = REQUESTERS
VERSION_EVALUATING, VERSION_EVALUATED = "evaluating", "evaluated"


def request(session: Session, principal: Principal, tenant: str, name: str, number: int,
            suite_name: str, *, against: int | None = None, again: bool = False) -> tuple[EvaluationOut, bool]:
    """Returns (evaluation, created). An unfinished or passed evaluation of the same version and
    suite (and incumbent) is returned instead of a new one, so a retried request costs no engine
    time; with `again`, only an unfinished one is. With `against`, the incumbent version is
    evaluated beside it in one batch."""
    principal.require(REQUESTERS, tenant)
    version = _live(session, adapters.find_version(session, tenant, name, number), tenant, name)
    adapter = existing(session, Adapter, version.adapter_id)
    suite = suites.usable_for(session, suite_name, adapter.tenant_id)
    if suite.base_model_id != adapter.base_model_id:
        raise Unprocessable(
            f"eval suite {suite_name!r} is for another base model than {tenant}/{name}",
            code="suite_base_mismatch", hint="Pick a suite for the adapter's base model.")
    if against is None:
        reused = _reusable(repository.latest_unfailed(session, version.id, suite.id), again)
        if reused is None:
            quotas.check_waiting(session, adapter.tenant_id, tenant)
        row = reused or create(session, version, suite, actor=principal.label)
        return to_out(session, row), reused is None
    if against == number:
        raise Unprocessable(f"{tenant}/{name}@{number} cannot be compared with itself",
                            code="same_version", hint="Name the version it would replace in `against`.")
    incumbent = _live(session, adapters.find_version(session, tenant, name, against), tenant, name)
    reused = _reusable(repository.latest_unfailed_pair(session, version.id, suite.id, incumbent.id), again)
    if reused is None:
        quotas.check_waiting(session, adapter.tenant_id, tenant, adding=2)
    row = reused or create_pair(session, version, incumbent, suite, actor=principal.label)
    return to_out(session, row), reused is None


def _live(session: Session, version: AdapterVersion, tenant: str, name: str) -> AdapterVersion:
    """The version under a shared lock, once it is neither retired nor deleted (retiring takes
    the lock exclusively: registry/lifecycle)."""
    (locked,) = adapter_rows.lock_versions(session, [version.id], shared=True)
    lifecycle.require_live(locked, f"{tenant}/{name}@{locked.number}", "evaluated")
    return locked


def _reusable(existing: Evaluation | None, again: bool) -> Evaluation | None:
    return None if again and existing is not None and existing.state in rules.FINISHED else existing


def request_required(session: Session, tenant: str, name: str, number: int, *,
                     actor: str) -> list[int]:
    """Evaluations of a new version against every suite its base's pools require and its
    adapter's own, each of the adapter's paired with every version in production (the version
    it would replace): their ids."""
    version = adapters.find_version(session, tenant, name, number)
    adapter = existing(session, Adapter, version.adapter_id)
    pools = repository.pools_on_base(session, adapter.base_model_id)
    own = set(policies.adapter_suites(adapter))
    names = sorted({suite for pool in pools for suite in pool.required_suites} | own)
    incumbents = [existing(session, AdapterVersion, i) for i in repository.aliased_version_ids(
        session, adapter.id, [p.id for p in pools], PRODUCTION) if i != version.id]
    ids = []
    for name_ in names:
        suite = suites.get_row(session, name_)
        if name_ in own and incumbents:
            rows = [create_pair(session, version, incumbent, suite, actor=actor) for incumbent in incumbents]
        else:
            rows = [create(session, version, suite, actor=actor)]
        ids += [i for row in rows for i in (row.id, row.incumbent_evaluation_id) if i]
    return ids


def create_pair(session: Session, challenger: AdapterVersion, incumbent: AdapterVersion,
                suite: EvalSuite, *, actor: str) -> Evaluation:
    """Queue the incumbent's evaluation and the challenger's that names it; workers claim the
    two together. Returns the challenger's."""
    names = {v.id: adapters.version_out(session, v).served_name for v in (challenger, incumbent)}
    held = create(session, incumbent, suite, actor=actor, context={"incumbent_for": names[challenger.id]})
    return create(session, challenger, suite, actor=actor, incumbent=held,
                  context={"against": names[incumbent.id], "incumbent_evaluation": held.id})


def create(session: Session, version: AdapterVersion, suite: EvalSuite, *, actor: str,
           context: dict | None = None, incumbent: Evaluation | None = None,
           priority: int = rules.NORMAL) -> Evaluation:
    """Queue an evaluation and audit the request (`context` adds to what the event says). Its
    task is sent once the transaction commits: a worker must find the row."""
    row = Evaluation(version_id=version.id, suite_id=suite.id, state=rules.QUEUED,
                     failing_metrics=[], attempts=0, requested_by=actor, priority=priority,
                     incumbent_evaluation_id=incumbent.id if incumbent is not None else None)
    session.add(row)
    session.flush()
    sync_version_state(session, version)
    served = adapters.version_out(session, version).served_name
    adapter = existing(session, Adapter, version.adapter_id)
    audit.record(session, actor=actor, action="evaluation.request", subject=served,
                 tenant_id=adapter.tenant_id,
                 after={"evaluation": row.id, "suite": suite.name, **(context or {})})
    task = (row.id, existing(session, BaseModel, adapter.base_model_id).name)
    pending_work.of(session).evaluations.append(task)  # queued for the workers once committed
    return row


def sync_version_state(session: Session, version: AdapterVersion) -> None:
    """A version is evaluating while any of its evaluations is unfinished, then evaluated; a
    retired or deleted one stays so."""
    states = repository.states_of_version(session, version.id)
    if states and version.state not in lifecycle.ENDED:
        version.state = VERSION_EVALUATED if states <= rules.FINISHED else VERSION_EVALUATING


def get(session: Session, principal: Principal, evaluation_id: int, *, examples_limit: int,
        examples_cursor: str | None) -> EvaluationOut:
    principal.require(READERS)  # the role first: a node token learns nothing, not even a 404
    row = session.get(Evaluation, evaluation_id)
    if row is None or not _may_read(session, principal, row):
        # The same answer for another tenant's evaluation: ids reveal nothing.
        raise NotFound(f"evaluation {evaluation_id} does not exist", code="evaluation_not_found",
                       hint="List a version's evaluations under its adapter.")
    examples, next_cursor = repository.page_of_examples(
        session, row.id, limit=examples_limit, cursor=examples_cursor)
    out = to_out(session, row)
    out.examples = Page(items=[ExampleOut.model_validate(e, from_attributes=True) for e in examples],
                        next_cursor=next_cursor)
    return out


def list_for_version(session: Session, principal: Principal, tenant: str, name: str, number: int,
                     *, limit: int, cursor: str | None) -> tuple[list[EvaluationOut], str | None]:
    principal.require(READERS, tenant)
    version = adapters.find_version(session, tenant, name, number)
    rows, next_cursor = repository.page_of_version(session, version.id, limit=limit, cursor=cursor)
    return [to_out(session, row) for row in rows], next_cursor


def _may_read(session: Session, principal: Principal, row: Evaluation) -> bool:
    if principal.is_global_admin:
        return True
    if principal.role not in READERS:
        return False
    version = existing(session, AdapterVersion, row.version_id)
    adapter = existing(session, Adapter, version.adapter_id)
    return existing(session, Tenant, adapter.tenant_id).name == principal.tenant


def to_out(session: Session, row: Evaluation) -> EvaluationOut:
    version = adapters.version_out(session, existing(session, AdapterVersion, row.version_id))
    return EvaluationOut(
        id=row.id, served_name=version.served_name, digest=version.digest,
        base_model=version.base_model,
        suite=existing(session, EvalSuite, row.suite_id).name, state=row.state, reason=row.reason,
        failing_metrics=row.failing_metrics,
        metrics={name: MetricResult.model_validate(m) for name, m in (row.metrics or {}).items()},
        engine=row.engine, timings=row.timings, attempts=row.attempts,
        requested_by=row.requested_by, created_at=row.created_at, started_at=row.started_at,
        finished_at=row.finished_at, pair=_pair_out(session, row),
    )


def _pair_out(session: Session, row: Evaluation) -> PairOut | None:
    if row.incumbent_evaluation_id is not None:
        role, other = "challenger", session.get(Evaluation, row.incumbent_evaluation_id)
    else:
        role, other = "incumbent", repository.challenger_of(session, row.id)
    if other is None:
        return None
    served = adapters.version_out(session, existing(session, AdapterVersion, other.version_id)).served_name
    return PairOut(role=role, other_evaluation_id=other.id, other_served_name=served,
                   other_state=other.state)
