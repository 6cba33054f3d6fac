from __future__ import annotations

from fastapi import APIRouter, Depends
from sqlalchemy.orm import Session

from registry.auth.dependencies import authenticated
from registry.auth.principal import Principal
from registry.canaries import service
from registry.canaries.schemas import CanaryStatus
from registry.promotions.endpoints import PromotionId
from registry.request_session import RequestSession

router = APIRouter(prefix="/v1/promotions", tags=["promotions"])


@router.get("/{promotion_id}/canary", response_model=CanaryStatus)
def canary_status(promotion_id: int = PromotionId, principal: Principal = Depends(authenticated),
                  session: Session = RequestSession):
    """The canary's step, and its last check: both sides' live metrics and each threshold."""
    return service.status_of(session, principal, promotion_id)


@router.post("/{promotion_id}/canary/pause", response_model=CanaryStatus)
def pause_canary(promotion_id: int = PromotionId, principal: Principal = Depends(authenticated),
                 session: Session = RequestSession):
    """Stop the analysis where it is; the canary keeps its weight."""
    return service.pause(session, principal, promotion_id)


@router.post("/{promotion_id}/canary/resume", response_model=CanaryStatus)
def resume_canary(promotion_id: int = PromotionId, principal: Principal = Depends(authenticated),
                  session: Session = RequestSession):
    """Go on after a pause (the step's window starts over) or through a manual gate. Opening a
    gate approves the next step: a second person's, never the version's uploader or the canary's
    requester (403 four_eyes)."""
    return service.resume(session, principal, promotion_id)
