from __future__ import annotations

from fastapi import APIRouter, Depends, Path
from sqlalchemy.orm import Session

from registry.auth.dependencies import authenticated
from registry.auth.principal import Principal, Role
from registry.eval_suites import service
from registry.eval_suites.schemas import SuiteCreate, SuiteOut
from registry.page_query import Paging
from registry.pagination import Page, PageRequest
from registry.request_session import RequestSession
from registry.storage import get_store

router = APIRouter(prefix="/v1/eval-suites", tags=["eval suites"])
PEOPLE = {Role.ADMIN, Role.REVIEWER, Role.UPLOADER}  # nodes and routers never need suites


@router.post("", status_code=201, response_model=SuiteOut)
def create_suite(spec: SuiteCreate, principal: Principal = Depends(authenticated),
                 session: Session = RequestSession):
    return service.create(session, get_store(), spec, principal)


@router.get("", response_model=Page[SuiteOut])
def list_suites(page: PageRequest = Paging, principal: Principal = Depends(authenticated),
                session: Session = RequestSession):
    principal.require(PEOPLE)
    return Page.of(service.list_page(session, principal, limit=page.limit, cursor=page.cursor))


@router.get("/{name}", response_model=SuiteOut)
def get_suite(name: str = Path(max_length=64), principal: Principal = Depends(authenticated),
              session: Session = RequestSession):
    principal.require(PEOPLE)
    return service.get(session, principal, name)


@router.get("/{tenant}/{name}", response_model=SuiteOut)
def get_tenant_suite(tenant: str = Path(max_length=64), name: str = Path(max_length=64),
                     principal: Principal = Depends(authenticated), session: Session = RequestSession):
    principal.require(PEOPLE, tenant)
    return service.get(session, principal, f"{tenant}/{name}")
