from __future__ import annotations

from fastapi import APIRouter, Depends
from sqlalchemy.orm import Session

from registry.adapters.endpoints import Name, Tenant
from registry.auth.dependencies import authenticated
from registry.auth.principal import Principal
from registry.evaluation_policies import service
from registry.evaluation_policies.schemas import EvaluationPolicy, EvaluationPolicyOut
from registry.request_session import RequestSession

router = APIRouter(prefix="/v1/adapters", tags=["adapters"])


@router.get("/{tenant}/{name}/evaluation-policy", response_model=EvaluationPolicyOut)
def get_policy(tenant: str = Tenant, name: str = Name, principal: Principal = Depends(authenticated),
               session: Session = RequestSession):
    return service.get(session, principal, tenant, name)


@router.put("/{tenant}/{name}/evaluation-policy", response_model=EvaluationPolicyOut)
def put_policy(spec: EvaluationPolicy, tenant: str = Tenant, name: str = Name,
               principal: Principal = Depends(authenticated), session: Session = RequestSession):
    return service.put(session, principal, tenant, name, spec)
