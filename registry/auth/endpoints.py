from __future__ import annotations

from fastapi import APIRouter, Depends

from registry.auth import tokens
from registry.auth.dependencies import any_token, authenticated
from registry.auth.principal import Principal, Role
from registry.auth.schemas import TokenCreate, TokenCreated, WhoAmI
from registry.db import transaction
from registry.errors import Forbidden

router = APIRouter(prefix="/v1", tags=["auth"])


@router.post("/tokens", status_code=201, response_model=TokenCreated)
def create_token(spec: TokenCreate, principal: Principal = Depends(authenticated)):
    principal.require({Role.ADMIN}, spec.tenant)
    if spec.tenant is None and not principal.is_global_admin:
        raise Forbidden("only a global admin may create tokens without a tenant")
    with transaction() as session:
        row, plain = tokens.create_token(
            session, subject=spec.subject, role=spec.role, tenant=spec.tenant, pool=spec.pool,
            tier=spec.tier, actor=principal.label,
        )
        return TokenCreated(id=row.id, subject=row.subject, role=spec.role, tenant=spec.tenant,
                            pool=spec.pool, tier=row.tier, token=plain)


@router.get("/whoami", response_model=WhoAmI)
def whoami(principal: Principal = Depends(any_token)):
    return WhoAmI(subject=principal.subject, role=principal.role, tenant=principal.tenant,
                  pool=principal.pool, tier=principal.tier)
