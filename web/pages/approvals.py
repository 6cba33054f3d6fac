"""The approval queue, one promotion with its evidence and, for a canary under analysis, its
live checks; the decision on it, and pausing or resuming a canary."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Form, Path, Request
from fastapi.responses import Response
from pydantic import ValidationError
from sqlalchemy.orm import Session

from registry.canaries import service as canaries
from registry.errors import LoraplaneError, Unprocessable
from registry.promotions import service as promotions
from registry.promotions.rules import AWAITING
from registry.promotions.schemas import Decision
from registry.request_session import RequestSession, discard
from web.pages.versions import version_view
from web.rendering import PageRoute, page, see_other
from web.session import SignedInVisit, check_csrf, viewer

router = APIRouter(route_class=PageRoute)
PromotionId = Path(ge=1, le=2**31 - 1)
QUEUE_LIMIT = 200


@router.get("/ui/")
def home() -> Response:
    return see_other("/ui/approvals")


@router.get("/ui/approvals")
def queue(request: Request, visit: SignedInVisit = Depends(viewer),
          session: Session = RequestSession) -> Response:
    return page(request, visit, "approvals.html", **_queue(session, visit))


@router.get("/ui/approvals/live")
def queue_live(request: Request, visit: SignedInVisit = Depends(viewer),
               session: Session = RequestSession) -> Response:
    """The queue alone, for the page's periodic refresh."""
    return page(request, visit, "_queue.html", **_queue(session, visit))


def _queue(session: Session, visit: SignedInVisit) -> dict:
    waiting, more = promotions.list_page(session, visit.principal, pool=None, state=AWAITING,
                                         tenant=None, limit=QUEUE_LIMIT, cursor=None)
    return {"waiting": waiting, "more": more is not None}


@router.get("/ui/promotions/{promotion_id}")
def promotion_page(request: Request, promotion_id: int = PromotionId,
                   visit: SignedInVisit = Depends(viewer), session: Session = RequestSession) -> Response:
    return _promotion_page(request, session, visit, promotion_id)


def _promotion_page(request: Request, session: Session, visit: SignedInVisit, promotion_id: int, *,
                    status: int = 200, error: LoraplaneError | None = None,
                    comment: str = "") -> Response:
    promotion = promotions.get(session, visit.principal, promotion_id)
    version = version_view(session, visit.principal, promotion.tenant, promotion.adapter,
                           promotion.version)
    who = visit.principal
    may_reject = promotions.may_decide(who, promotion.tenant)
    canary = canaries.status_of(session, who, promotion_id) if promotion.analysis else None
    return page(request, visit, "promotion.html", status=status, promotion=promotion,
                may_reject=may_reject, error=error, comment=comment, canary=canary, **version)


@router.post("/ui/promotions/{promotion_id}/canary")
def steer_canary(request: Request, promotion_id: int = PromotionId, action: str = Form(..., max_length=16),
                 csrf_token: str = Form("", max_length=128), visit: SignedInVisit = Depends(viewer),
                 session: Session = RequestSession) -> Response:
    """Pause a canary's analysis, or resume it (also through a manual gate)."""
    check_csrf(visit, csrf_token)
    try:
        if action not in ("pause", "resume"):
            raise Unprocessable(f"unknown action {action[:16]!r}", hint="Use Pause or Resume.")
        (canaries.pause if action == "pause" else canaries.resume)(session, visit.principal, promotion_id)
    except LoraplaneError as error:
        discard(request)
        return _promotion_page(request, session, visit, promotion_id, status=error.status, error=error)
    return see_other(f"/ui/promotions/{promotion_id}?canary={action}")


@router.post("/ui/promotions/{promotion_id}/decide")
def decide(request: Request, promotion_id: int = PromotionId, decision: str = Form(..., max_length=16),
           comment: str = Form("", max_length=20_000), csrf_token: str = Form("", max_length=128),
           digest: str = Form("", max_length=64), visit: SignedInVisit = Depends(viewer),
           session: Session = RequestSession) -> Response:
    check_csrf(visit, csrf_token)
    try:
        if decision not in ("approve", "reject"):
            raise Unprocessable(f"unknown decision {decision[:16]!r}", hint="Use Approve or Reject.")
        try:
            why = Decision(comment=comment).comment
        except ValidationError:
            raise Unprocessable("a decision needs a comment that says why (at most 2000 characters)",
                                code="comment_required", hint="Write why in the comment box.") from None
        if decision == "approve":  # the digest this page showed: what the reviewer approves
            promotions.approve(session, visit.principal, promotion_id, why, digest or None)
        else:
            promotions.reject(session, visit.principal, promotion_id, why)
    except LoraplaneError as error:
        # The page shows the refusal, so nothing raises past this route to roll the decision
        # back: undo it here, then read the promotion as it stands.
        discard(request)
        return _promotion_page(request, session, visit, promotion_id, status=error.status,
                               error=error, comment=comment)
    return see_other(f"/ui/promotions/{promotion_id}?decided={decision}")
