from __future__ import annotations

from fastapi import APIRouter, Depends, Response
from sqlalchemy.orm import Session

from registry.auth.dependencies import authenticated
from registry.auth.principal import Principal
from registry.base_models import service
from registry.base_models.schemas import AliasAdd, BaseModelCreate, BaseModelOut
from registry.page_query import Paging
from registry.pagination import Page, PageRequest
from registry.request_session import RequestSession

router = APIRouter(prefix="/v1/base-models", tags=["base models"])


@router.post("", status_code=201, response_model=BaseModelOut)
def register_base_model(spec: BaseModelCreate, principal: Principal = Depends(authenticated),
                        session: Session = RequestSession):
    principal.require_global_admin()
    return service.register(session, spec, actor=principal.label)


@router.get("", response_model=Page[BaseModelOut])
def list_base_models(page: PageRequest = Paging, principal: Principal = Depends(authenticated),
                     session: Session = RequestSession):
    return Page.of(service.list_page(session, limit=page.limit, cursor=page.cursor))


@router.get("/{name:path}", response_model=BaseModelOut)
def get_base_model(name: str, principal: Principal = Depends(authenticated),
                   session: Session = RequestSession):
    return service.to_out(session, service.get(session, name))


@router.post("/{name:path}/aliases", status_code=201, response_model=BaseModelOut,
             responses={200: {"description": "The base already had this alias: nothing changed."}})
def add_alias(spec: AliasAdd, name: str, response: Response,
              principal: Principal = Depends(authenticated), session: Session = RequestSession):
    """Let adapters name the base by another name too (global admins). 409 alias_taken when it
    is already another base's name or alias."""
    principal.require_global_admin()
    base, added = service.add_alias(session, name, spec.alias, actor=principal.label)
    if not added:
        response.status_code = 200
    return base


@router.delete("/{name:path}/aliases/{alias:path}", response_model=BaseModelOut)
def remove_alias(name: str, alias: str, principal: Principal = Depends(authenticated),
                 session: Session = RequestSession):
    """Stop accepting an alias in uploads (global admins). Versions uploaded under it keep their
    base."""
    principal.require_global_admin()
    return service.remove_alias(session, name, alias, actor=principal.label)
