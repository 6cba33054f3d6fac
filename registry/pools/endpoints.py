from __future__ import annotations

from fastapi import APIRouter, Depends, Query

from registry.auth.dependencies import authenticated
from registry.auth.principal import Principal
from registry.db import transaction
from registry.pagination import Page
from registry.pools import service
from registry.pools.schemas import PoolCreate, PoolOut

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
