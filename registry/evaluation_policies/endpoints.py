from __future__ import annotations

from fastapi import APIRouter, Depends, Response
from sqlalchemy.orm import Session

from registry.adapters.endpoints import Name, Tenant
from registry.auth.dependencies import authenticated
from registry.auth.principal import Principal
from registry.evaluation_policies import service
from registry.evaluation_policies.schemas import EvaluationPolicy, EvaluationPolicyOut, PolicyApproval
from registry.request_session import RequestSession

router = APIRouter(prefix="/v1/adapters", tags=["adapters"])


@router.get("/{tenant}/{name}/evaluation-policy", response_model=EvaluationPolicyOut)
def get_policy(tenant: str = Tenant, name: str = Name, principal: Principal = Depends(authenticated),
               session: Session = RequestSession):
    return service.get(session, principal, tenant, name)


@router.put("/{tenant}/{name}/evaluation-policy", response_model=EvaluationPolicyOut, responses={
    202: {"description": "The policy would weaken the one in force: it is proposed, and applies once a "
                         "second person approves it (`proposed`)."}})
def put_policy(spec: EvaluationPolicy, response: Response, tenant: str = Tenant, name: str = Name,
               principal: Principal = Depends(authenticated), session: Session = RequestSession):
    policy, applied = service.put(session, principal, tenant, name, spec)
    if not applied:
        response.status_code = 202
    return policy


@router.post("/{tenant}/{name}/evaluation-policy/approve", response_model=EvaluationPolicyOut)
def approve_policy(body: PolicyApproval, tenant: str = Tenant, name: str = Name,
                   principal: Principal = Depends(authenticated), session: Session = RequestSession):
    """Put a proposed policy in force: a reviewer or admin of the tenant who is not its proposer,
    naming the proposal they read (`proposed.sha256`)."""
    return service.approve(session, principal, tenant, name, body.sha256)


@router.delete("/{tenant}/{name}/evaluation-policy/proposed", response_model=EvaluationPolicyOut)
def withdraw_policy(tenant: str = Tenant, name: str = Name, principal: Principal = Depends(authenticated),
                    session: Session = RequestSession):
    return service.withdraw(session, principal, tenant, name)
