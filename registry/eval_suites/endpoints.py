from __future__ import annotations

from fastapi import APIRouter, Depends, Path, Query

from registry.auth.dependencies import authenticated
from registry.auth.principal import Principal, Role
from registry.db import transaction
from registry.eval_suites import service
from registry.eval_suites.schemas import SuiteCreate, SuiteOut
from registry.pagination import Page
from registry.storage import get_store

router = APIRouter(prefix="/v1/eval-suites", tags=["eval suites"])
PEOPLE = {Role.ADMIN, Role.REVIEWER, Role.UPLOADER}  # nodes and routers never need suites


@router.post("", status_code=201, response_model=SuiteOut)
def create_suite(spec: SuiteCreate, principal: Principal = Depends(authenticated)):
    principal.require_global_admin()
    with transaction() as session:
        return service.create(session, get_store(), spec, actor=principal.label)


@router.get("", response_model=Page[SuiteOut])
def list_suites(
    limit: int = Query(50, ge=1, le=200),
    cursor: str | None = Query(None, max_length=18),
    principal: Principal = Depends(authenticated),
):
    principal.require(PEOPLE)
    with transaction() as session:
        items, next_cursor = service.list_page(session, limit=limit, cursor=cursor)
        return Page(items=items, next_cursor=next_cursor)


@router.get("/{name}", response_model=SuiteOut)
def get_suite(name: str = Path(max_length=64), principal: Principal = Depends(authenticated)):
    principal.require(PEOPLE)
    with transaction() as session:
        return service.get(session, name)
