"""Tokens: who holds which, issued by whom, until when; revoke one. Admins see their scope's
tokens, everyone else their own. Secrets are shown only once, at creation (API or CLI)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Form, Path, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session

from registry.request_session import RequestSession
from registry.tokens import service
from web.rendering import PageRoute, page, see_other
from web.session import SignedInVisit, check_csrf, viewer

router = APIRouter(route_class=PageRoute)
TOKENS_SHOWN = 200


@router.get("/ui/tokens")
def tokens_page(request: Request, visit: SignedInVisit = Depends(viewer),
                session: Session = RequestSession) -> Response:
    tokens, more = service.list_tokens(session, visit.principal, tenant=None,
                                       include_revoked=False, limit=TOKENS_SHOWN, cursor=None)
    return page(request, visit, "tokens.html", tokens=tokens, more=more is not None)


@router.post("/ui/tokens/{token_id}/revoke")
def revoke(request: Request, token_id: int = Path(ge=1, le=2**31 - 1),
           csrf_token: str = Form("", max_length=128), visit: SignedInVisit = Depends(viewer),
           session: Session = RequestSession) -> Response:
    check_csrf(visit, csrf_token)
    service.revoke(session, visit.principal, token_id)
    # Revoking the token this page was opened with ends the session too: sign-in follows.
    return see_other("/ui/tokens")
