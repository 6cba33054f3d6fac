from __future__ import annotations

from fastapi import APIRouter, Depends, Query

from registry.auth.dependencies import authenticated
from registry.auth.principal import Principal
from registry.db import transaction
from registry.pagination import Page
from registry.pools import service
from registry.pools.schemas import PoolCreate, PoolOut, PoolUpdate
from registry.requalification import service as requalification
from registry.requalification.schemas import RequalificationsOut

router = APIRouter(prefix="/v1/pools", tags=["pools"])


@router.post("", status_code=201, response_model=PoolOut)
def create_pool(spec: PoolCreate, principal: Principal = Depends(authenticated)):
    principal.require_global_admin()
    with transaction() as session:
        return service.create(session, spec, actor=principal.label)


@router.get("", response_model=Page[PoolOut])
def list_pools(
    limit: int = Query(50, ge=1, le=200),
    cursor: str | None = Query(None, max_length=18),
    principal: Principal = Depends(authenticated),
):
    with transaction() as session:
        items, next_cursor = service.list_page(session, limit=limit, cursor=cursor)
        return Page(items=items, next_cursor=next_cursor)


@router.get("/{name}", response_model=PoolOut)
def get_pool(name: str, principal: Principal = Depends(authenticated)):
    with transaction() as session:
        return service.get(session, name)


@router.patch("/{name}", response_model=PoolOut)
def update_pool(spec: PoolUpdate, name: str, principal: Principal = Depends(authenticated)):
    """Change the pool's re-qualification policy (global admins)."""
    principal.require_global_admin()
    with transaction() as session:
        return service.update(session, name, spec, actor=principal.label)


@router.get("/{pool}/requalifications", response_model=RequalificationsOut)
def list_requalifications(pool: str, principal: Principal = Depends(authenticated)):
    """Versions marked to qualify again after the pool's engine or base config changed, why, and
    the policy they serve under meanwhile. A tenant's people see their own versions only."""
    with transaction() as session:
        return requalification.listing(session, principal, pool)
