from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Path, Query
from sqlalchemy.orm import Session

from registry.auth.dependencies import authenticated
from registry.auth.principal import Principal
from registry.page_query import Paging
from registry.pagination import Page, PageRequest
from registry.promotions import service
from registry.promotions.schemas import ALIAS_PATTERN, AliasOut, Decision, PromotionCreate, PromotionOut
from registry.request_session import RequestSession

router = APIRouter(tags=["promotions"])
PromotionId = Path(ge=1, le=2**31 - 1)
State = Literal["requested", "awaiting_approval", "approved", "active", "rejected", "superseded",
                "rolled_back"]


@router.post("/v1/pools/{pool}/promotions", status_code=201, response_model=PromotionOut)
def request_promotion(spec: PromotionCreate, pool: str, principal: Principal = Depends(authenticated),
                      session: Session = RequestSession):
    """Ask to point the pool's alias at a version. Every gate must pass (422 lists those that
    block); it then awaits a reviewer who is neither the uploader nor the requester."""
    return service.request(session, principal, pool, spec)


@router.get("/v1/promotions", response_model=Page[PromotionOut])
def list_promotions(
    pool: str | None = Query(None, max_length=64),
    state: State | None = None,
    tenant: str | None = Query(None, max_length=64),
    page: PageRequest = Paging,
    principal: Principal = Depends(authenticated),
    session: Session = RequestSession,
):
    return Page.of(service.list_page(session, principal, pool=pool, state=state, tenant=tenant,
                                     limit=page.limit, cursor=page.cursor))


@router.get("/v1/promotions/{promotion_id}", response_model=PromotionOut)
def get_promotion(promotion_id: int = PromotionId, principal: Principal = Depends(authenticated),
                  session: Session = RequestSession):
    return service.get(session, principal, promotion_id)


@router.post("/v1/promotions/{promotion_id}/approve", response_model=PromotionOut)
def approve_promotion(decision: Decision, promotion_id: int = PromotionId,
                      principal: Principal = Depends(authenticated), session: Session = RequestSession):
    """Re-checks every gate, then makes the promotion active and bumps the pool's generation."""
    return service.approve(session, principal, promotion_id, decision.comment, decision.digest)


@router.post("/v1/promotions/{promotion_id}/reject", response_model=PromotionOut)
def reject_promotion(decision: Decision, promotion_id: int = PromotionId,
                     principal: Principal = Depends(authenticated), session: Session = RequestSession):
    return service.reject(session, principal, promotion_id, decision.comment)


@router.get("/v1/pools/{pool}/aliases", response_model=list[AliasOut])
def list_aliases(pool: str, principal: Principal = Depends(authenticated),
                 session: Session = RequestSession):
    return service.list_aliases(session, principal, pool)


@router.post("/v1/pools/{pool}/aliases/{tenant}/{name}/{alias}/rollback", response_model=PromotionOut)
def rollback_alias(decision: Decision, pool: str, tenant: str, name: str,
                   alias: str = Path(pattern=ALIAS_PATTERN, max_length=32),
                   principal: Principal = Depends(authenticated), session: Session = RequestSession):
    """Point the alias back at the version before the current one, in one call. The current
    version stays loaded until every live node has moved on."""
    return service.rollback(session, principal, pool, tenant, name, alias, decision.comment)
