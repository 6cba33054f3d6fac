from __future__ import annotations

from fastapi import APIRouter, Depends, Path
from sqlalchemy.orm import Session

from registry.auth.dependencies import authenticated
from registry.auth.principal import Principal
from registry.names import NAME_PATTERN
from registry.request_session import RequestSession
from registry.signing_keys import service
from registry.signing_keys.schemas import (
    SigningKeyCreate, SigningKeyOut, SigningPolicyOut, SigningPolicyUpdate,
)

router = APIRouter(prefix="/v1/tenants/{tenant}", tags=["signing keys"])
# The pattern is documented here and enforced by check_name, which gives the clearer error.
Tenant = Path(max_length=64, json_schema_extra={"pattern": NAME_PATTERN.pattern})
KeyName = Path(max_length=64, json_schema_extra={"pattern": NAME_PATTERN.pattern})


@router.post("/signing-keys", status_code=201, response_model=SigningKeyOut)
def add_signing_key(spec: SigningKeyCreate, tenant: str = Tenant,
                    principal: Principal = Depends(authenticated), session: Session = RequestSession):
    """Trust a public key for the tenant's signed uploads (a model.sig beside the adapter)."""
    return service.add(session, principal, tenant, spec)


@router.get("/signing-keys", response_model=list[SigningKeyOut])
def list_signing_keys(tenant: str = Tenant, include_revoked: bool = False,
                      principal: Principal = Depends(authenticated), session: Session = RequestSession):
    return service.list_keys(session, principal, tenant, include_revoked=include_revoked)


@router.post("/signing-keys/{name}/revoke", response_model=SigningKeyOut)
def revoke_signing_key(tenant: str = Tenant, name: str = KeyName,
                       principal: Principal = Depends(authenticated), session: Session = RequestSession):
    """Uploads signed by this key are refused from now on; versions already verified keep their
    record. Safe to repeat."""
    return service.revoke(session, principal, tenant, name)


@router.get("/signing-policy", response_model=SigningPolicyOut)
def get_signing_policy(tenant: str = Tenant, principal: Principal = Depends(authenticated),
                       session: Session = RequestSession):
    return service.policy(session, principal, tenant)


@router.put("/signing-policy", response_model=SigningPolicyOut)
def set_signing_policy(spec: SigningPolicyUpdate, tenant: str = Tenant,
                       principal: Principal = Depends(authenticated), session: Session = RequestSession):
    """Require (or stop requiring) that every upload of the tenant is signed by one of its keys."""
    return service.set_policy(session, principal, tenant, spec)
