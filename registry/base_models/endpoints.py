from __future__ import annotations

from fastapi import APIRouter, Depends, Query

from registry.auth.dependencies import authenticated
from registry.auth.principal import Principal
from registry.base_models import service
from registry.base_models.schemas import BaseModelCreate, BaseModelOut
from registry.db import transaction
from registry.pagination import Page

router = APIRouter(prefix="/v1/base-models", tags=["base models"])


@router.post("", status_code=201, response_model=BaseModelOut)
def register_base_model(spec: BaseModelCreate, principal: Principal = Depends(authenticated)):
    principal.require_global_admin()
    with transaction() as session:
        return service.register(session, spec, actor=principal.label)


@router.get("", response_model=Page[BaseModelOut])
def list_base_models(
    limit: int = Query(50, ge=1, le=200),
    cursor: str | None = Query(None, max_length=18),
    principal: Principal = Depends(authenticated),
):
    with transaction() as session:
        items, next_cursor = service.list_page(session, limit=limit, cursor=cursor)
        return Page(items=items, next_cursor=next_cursor)


@router.get("/{name:path}", response_model=BaseModelOut)
def get_base_model(name: str, principal: Principal = Depends(authenticated)):
    with transaction() as session:
        return service.to_out(session, service.get(session, name))
