"""Read and set an adapter's evaluation policy, and answer which suites a version must pass.

The policy is the adapter's own: its tenant's admins and uploaders set it, since they know the
task. A pool's suites still apply to every adapter in the pool; the promotion gates require both
and name the level that is missing."""

from __future__ import annotations

from sqlalchemy.orm import Session

from registry import audit
from registry.adapters import service as adapters
from registry.auth.principal import Principal, Role
from registry.errors import Unprocessable
from registry.eval_suites import service as suites
from registry.evaluation_policies.schemas import QUALITY_METRICS, EvaluationPolicy, EvaluationPolicyOut
from registry.tables import Adapter, AdapterVersion, BaseModel, Pool

READERS = {Role.ADMIN, Role.UPLOADER, Role.REVIEWER}
EDITORS = {Role.ADMIN, Role.UPLOADER}


def get(session: Session, principal: Principal, tenant: str, name: str) -> EvaluationPolicyOut:
    principal.require(READERS, tenant)
    return _out(tenant, adapters.find_adapter(session, tenant, name))


def put(session: Session, principal: Principal, tenant: str, name: str,
        spec: EvaluationPolicy) -> EvaluationPolicyOut:
    """Replace the policy. Every suite must be one this adapter may use (global, or its tenant's)
    and be built for its base; another tenant's suite is answered as one that does not exist."""
    principal.require(EDITORS, tenant)
    adapter = adapters.find_adapter(session, tenant, name)
    for ref in spec.required_suites:
        suite = suites.usable_for(session, ref, adapter.tenant_id)
        if suite.base_model_id != adapter.base_model_id:
            base = session.get(BaseModel, adapter.base_model_id).name
            raise Unprocessable(f"eval suite {ref!r} is for another base model than {tenant}/{name} "
                                f"({base!r})", code="suite_base_mismatch",
                                hint="Pick suites built for the adapter's base model.")
    before = adapter.evaluation_policy
    adapter.evaluation_policy = spec.model_dump(mode="json")
    session.flush()
    audit.record(session, actor=principal.label, action="adapter.evaluation_policy",
                 subject=f"{tenant}/{name}", tenant_id=adapter.tenant_id,
                 before={"policy": before}, after={"policy": adapter.evaluation_policy})
    return _out(tenant, adapter)


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
        version = session.get(AdapterVersion, version_id)
        out[version_id] = suites_for(pool, session.get(Adapter, version.adapter_id))
    return out


def every_suite(required: dict[int, list[str]]) -> list[str]:
    return sorted({suite for names in required.values() for suite in names})


def _out(tenant: str, adapter: Adapter) -> EvaluationPolicyOut:
    policy = of(adapter)
    return EvaluationPolicyOut(tenant=tenant, adapter=adapter.name, **policy.model_dump(),
                               effective_margins={m: policy.challenger.margin(m) for m in QUALITY_METRICS})
