from __future__ import annotations

from fastapi import APIRouter, Depends
from sqlalchemy.orm import Session

from registry.auth.dependencies import authenticated
from registry.auth.principal import Principal
from registry.page_query import Paging
from registry.pagination import Page, PageRequest
from registry.pools import service
from registry.pools.schemas import PoolCreate, PoolOut, PoolUpdate
from registry.request_session import RequestSession
from registry.requalification import service as requalification
from registry.requalification.schemas import EngineDeclaration, RequalificationsOut

router = APIRouter(prefix="/v1/pools", tags=["pools"])


@router.post("", status_code=201, response_model=PoolOut)
def create_pool(spec: PoolCreate, principal: Principal = Depends(authenticated),
                session: Session = RequestSession):
    principal.require_global_admin()
    return service.create(session, spec, actor=principal.label)


@router.get("", response_model=Page[PoolOut])
def list_pools(page: PageRequest = Paging, principal: Principal = Depends(authenticated),
               session: Session = RequestSession):
    return Page.of(service.list_page(session, limit=page.limit, cursor=page.cursor))


@router.get("/{name}", response_model=PoolOut)
def get_pool(name: str, principal: Principal = Depends(authenticated),
             session: Session = RequestSession):
    return service.get(session, name)


@router.patch("/{name}", response_model=PoolOut)
def update_pool(spec: PoolUpdate, name: str, principal: Principal = Depends(authenticated),
                session: Session = RequestSession):
    """Change the pool's re-qualification policy, its required suites, or how many routers must
    each reach a canary's verdict (global admins). A suite added is queued at once for every
    version the pool serves."""
    principal.require_global_admin()
    return service.update(session, name, spec, actor=principal.label)


@router.get("/{pool}/requalifications", response_model=RequalificationsOut)
def list_requalifications(pool: str, principal: Principal = Depends(authenticated),
                          session: Session = RequestSession):
    """Versions marked to qualify again after the pool's engine or base config changed, why, and
    the policy they serve under meanwhile. A tenant's people see their own versions only."""
    return requalification.listing(session, principal, pool)


@router.post("/{pool}/engines", response_model=RequalificationsOut)
def declare_engine(spec: EngineDeclaration, pool: str, principal: Principal = Depends(authenticated),
                   session: Session = RequestSession):
    """Declare the engine the pool's nodes run (global admins): one node's report of a new engine
    starts re-qualification only once it is declared, or once a quorum of live nodes reports it."""
    return requalification.declare_engine(session, principal, pool, spec.model_dump())
