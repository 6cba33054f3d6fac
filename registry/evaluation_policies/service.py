"""Read and set an adapter's evaluation policy, and answer which suites a version must pass.

The policy is the adapter's own: its tenant's admins and uploaders set it, since they know the
task. A pool's suites still apply to every adapter in the pool; the promotion gates require both
and name the level that is missing.

A policy that only strengthens applies at once. One that weakens (a suite dropped, a margin
raised, an improvement no longer required) is proposed: it waits, the old policy in force, until
a second person approves it (a reviewer or admin of the tenant who is not, and could not act
as, its proposer), so that an uploader cannot lower the bar for their own next version unseen."""

from __future__ import annotations

from sqlalchemy.orm import Session

import hashlib
from datetime import UTC, datetime

from registry import audit
from registry.adapters import service as adapters
from registry.auth import lineage
from registry.clock import aware
from registry.auth.principal import Principal, Role
from registry.errors import Conflict, Forbidden, Unprocessable
from registry.eval_suites import service as suites
from registry.evaluation_policies import changes
from registry.evaluation_policies.schemas import (
    QUALITY_METRICS, EvaluationPolicy, EvaluationPolicyOut, ProposedPolicy,
)
from registry.rows import existing
from registry.tables import Adapter, AdapterVersion, BaseModel, Pool
from signed_digests.provenance import canonical

READERS = {Role.ADMIN, Role.UPLOADER, Role.REVIEWER}
EDITORS = {Role.ADMIN, Role.UPLOADER}
APPROVERS = {Role.ADMIN, Role.REVIEWER}


def get(session: Session, principal: Principal, tenant: str, name: str) -> EvaluationPolicyOut:
    principal.require(READERS, tenant)
    return _out(session, tenant, adapters.find_adapter(session, tenant, name))


def put(session: Session, principal: Principal, tenant: str, name: str,
        spec: EvaluationPolicy) -> tuple[EvaluationPolicyOut, bool]:
    """Replace the policy, or propose it when it weakens the one in force; returns (policy,
    applied). Every suite must be one this adapter may use (global, or its tenant's) and be
    built for its base; another tenant's suite is answered as one that does not exist. A new
    policy replaces any earlier proposal."""
    principal.require(EDITORS, tenant)
    adapter = adapters.find_adapter_for_update(session, tenant, name)
    for ref in spec.required_suites:
        suite = suites.usable_for(session, ref, adapter.tenant_id)
        if suite.base_model_id != adapter.base_model_id:
            base = existing(session, BaseModel, adapter.base_model_id).name
            raise Unprocessable(f"eval suite {ref!r} is for another base model than {tenant}/{name} "
                                f"({base!r})", code="suite_base_mismatch",
                                hint="Pick suites built for the adapter's base model.")
    weakens = changes.weakenings(of(adapter), spec)
    if not weakens:
        if adapter.proposed_evaluation_policy is not None:
            audit.record(session, actor=principal.label, action="adapter.evaluation_policy.withdrawn",
                         subject=f"{tenant}/{name}", tenant_id=adapter.tenant_id,
                         before={"proposed": adapter.proposed_evaluation_policy},
                         after={"replaced_by": spec.model_dump(mode="json")})
        _withdraw(adapter)
        _apply(session, adapter, spec.model_dump(mode="json"), actor=principal.label, tenant=tenant)
        return _out(session, tenant, adapter), True
    adapter.proposed_evaluation_policy = spec.model_dump(mode="json")
    adapter.policy_proposed_by, adapter.policy_proposed_by_identity_id = principal.label, principal.identity_id
    adapter.policy_proposed_at = datetime.now(UTC)
    session.flush()
    audit.record(session, actor=principal.label, action="adapter.evaluation_policy.proposed",
                 subject=f"{tenant}/{name}", tenant_id=adapter.tenant_id,
                 before={"policy": adapter.evaluation_policy},
                 after={"proposed": adapter.proposed_evaluation_policy, "weakens": weakens})
    return _out(session, tenant, adapter), False


def approve(session: Session, principal: Principal, tenant: str, name: str, seen_sha256: str) -> EvaluationPolicyOut:
    """Put the proposed policy in force: a reviewer or admin of the tenant, never its proposer
    nor anyone in the proposer's token lineage, and only the proposal they read (`seen_sha256`)."""
    principal.require(APPROVERS, tenant)
    adapter = adapters.find_adapter_for_update(session, tenant, name)
    if adapter.proposed_evaluation_policy is None:
        raise Conflict(f"{tenant}/{name} has no proposed evaluation policy to approve",
                       code="no_proposed_policy", hint="A policy that weakens the current one is proposed "
                       "with PUT .../evaluation-policy; one that does not applies at once.")
    if seen_sha256 != _proposal_sha256(adapter):
        raise Conflict(f"the proposed policy of {tenant}/{name} is not the one you read: it was replaced "
                       "or withdrawn since", code="proposal_changed",
                       hint="Read it again (GET .../evaluation-policy), then approve its `proposed.sha256`.")
    proposer = adapter.policy_proposed_by_identity_id
    refused = (("who proposed it has no recorded identity", "Propose it again with a current token.")
               if proposer is None else lineage.could_act_as(session, principal.identity_id, proposer,
                                                             "proposed this policy"))
    if refused is not None:
        raise Forbidden(refused[0], code="four_eyes", hint=refused[1])
    proposed, by = adapter.proposed_evaluation_policy, adapter.policy_proposed_by
    _withdraw(adapter)
    _apply(session, adapter, proposed, actor=principal.label, tenant=tenant, proposed_by=by)
    return _out(session, tenant, adapter)


def withdraw(session: Session, principal: Principal, tenant: str, name: str) -> EvaluationPolicyOut:
    """Drop the proposal: its tenant's editors and reviewers may."""
    principal.require(EDITORS | APPROVERS, tenant)
    adapter = adapters.find_adapter_for_update(session, tenant, name)
    if adapter.proposed_evaluation_policy is None:
        raise Conflict(f"{tenant}/{name} has no proposed evaluation policy", code="no_proposed_policy")
    audit.record(session, actor=principal.label, action="adapter.evaluation_policy.withdrawn",
                 subject=f"{tenant}/{name}", tenant_id=adapter.tenant_id,
                 before={"proposed": adapter.proposed_evaluation_policy}, after=None)
    _withdraw(adapter)
    return _out(session, tenant, adapter)


def _proposal_sha256(adapter: Adapter) -> str:
    """The proposal's policy, proposer and time: a new proposal of the same policy is another one."""
    when = aware(adapter.policy_proposed_at).isoformat() if adapter.policy_proposed_at else None
    document = [adapter.proposed_evaluation_policy, adapter.policy_proposed_by_identity_id, when]
    return hashlib.sha256(canonical(document)).hexdigest()


def _apply(session: Session, adapter: Adapter, policy: dict, *, actor: str, tenant: str,
           proposed_by: str | None = None) -> None:
    before = adapter.evaluation_policy
    adapter.evaluation_policy = policy
    session.flush()
    audit.record(session, actor=actor, action="adapter.evaluation_policy",
                 subject=f"{tenant}/{adapter.name}", tenant_id=adapter.tenant_id,
                 before={"policy": before},
                 after={"policy": policy, **({"proposed_by": proposed_by} if proposed_by else {})})


def _withdraw(adapter: Adapter) -> None:
    adapter.proposed_evaluation_policy = None
    adapter.policy_proposed_by = adapter.policy_proposed_by_identity_id = adapter.policy_proposed_at = None


def of(adapter: Adapter) -> EvaluationPolicy:
    return EvaluationPolicy.model_validate(adapter.evaluation_policy or {})


def adapter_suites(adapter: Adapter) -> list[str]:
    return list(of(adapter).required_suites)


def suites_for(pool: Pool, adapter: Adapter) -> list[str]:
    """Every suite a version of `adapter` must pass to serve in `pool`: the pool's, then the
    adapter's own."""
    pool_suites = list(pool.required_suites)
    return pool_suites + [s for s in adapter_suites(adapter) if s not in pool_suites]


def suites_for_versions(session: Session, pool: Pool, version_ids: set[int]) -> dict[int, list[str]]:
    """suites_for, by version id."""
    out = {}
    for version_id in version_ids:
        version = existing(session, AdapterVersion, version_id)
        out[version_id] = suites_for(pool, existing(session, Adapter, version.adapter_id))
    return out


def every_suite(required: dict[int, list[str]]) -> list[str]:
    return sorted({suite for names in required.values() for suite in names})


def changes_since(earlier: dict | None, adapter: Adapter) -> list[str]:
    """What changed in the adapter's policy since `earlier` (a promotion's), weakenings marked."""
    current = of(adapter)
    return [("weakens: " if c.weakens else "") + c.text
            for c in changes.between(EvaluationPolicy.model_validate(earlier or {}), current)]


def _out(session: Session, tenant: str, adapter: Adapter) -> EvaluationPolicyOut:
    policy = of(adapter)
    proposed = None
    if adapter.proposed_evaluation_policy is not None:
        spec = EvaluationPolicy.model_validate(adapter.proposed_evaluation_policy)
        proposed = ProposedPolicy(policy=spec, weakens=changes.weakenings(policy, spec),
                                  proposed_by=adapter.policy_proposed_by or "",
                                  proposed_at=adapter.policy_proposed_at, sha256=_proposal_sha256(adapter))
    return EvaluationPolicyOut(tenant=tenant, adapter=adapter.name, **policy.model_dump(),
                               effective_margins={m: policy.challenger.margin(m) for m in QUALITY_METRICS},
                               proposed=proposed)
