"""Sign in with an API token, and sign out."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session

from registry.errors import LoraplaneError
from registry.request_session import RequestSession, discard
from registry.settings import get_settings
from web.rendering import PageRoute, page, see_other
from web.session import (Visit, check_csrf, end_session, remember_nonce, sign_in, start_session,
                         visitor, with_nonce)

router = APIRouter(route_class=PageRoute)


def safe_next(target: str | None) -> str:
    """Only a dashboard path: never another site (an open redirect)."""
    if target and target.startswith("/ui/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/ui/approvals"


def sso_offer() -> dict[str, str] | None:
    """The sign-on button's provider, when people sign on here."""
    settings = get_settings()
    return {"provider": settings.sso_provider_name} if settings.sso_enabled else None


def _form(request: Request, visit: Visit, next: str | None, *, status: int = 200,
          error: LoraplaneError | None = None) -> Response:
    response = page(request, visit, "sign_in.html", status=status, next=safe_next(next), error=error,
                    sso=sso_offer())
    remember_nonce(request, response, visit)
    return response


@router.get("/ui/sign-in")
def sign_in_form(request: Request, next: str | None = None,
                 visit: Visit = Depends(visitor)) -> Response:
    if visit.principal is not None:
        return see_other(safe_next(next))
    return _form(request, with_nonce(visit), next)


@router.post("/ui/sign-in")
def sign_in_submit(request: Request, token: str = Form("", max_length=512),
                   csrf_token: str = Form("", max_length=128),
                   next: str = Form("", max_length=300), visit: Visit = Depends(visitor),
                   session: Session = RequestSession) -> Response:
    check_csrf(visit, csrf_token)
    try:
        principal = sign_in(session, token)
    except LoraplaneError as error:
        discard(request)  # the form answers the refusal: nothing of the attempt stays
        return _form(request, with_nonce(visit), next, status=error.status, error=error)
    response = see_other(safe_next(next))
    start_session(session, request, response, principal)
    return response


@router.post("/ui/sign-out")
def sign_out(csrf_token: str = Form("", max_length=128), visit: Visit = Depends(visitor),
             session: Session = RequestSession) -> Response:
    check_csrf(visit, csrf_token)
    response = see_other("/ui/sign-in")
    end_session(session, visit, response)
    return response
