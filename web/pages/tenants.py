"""Tenants, for global admins: create one, rename it (its display name: the slug never changes),
disable or enable it, and set its own quotas. Every form carries the CSRF token; a refused form
shows the tenants again with the reason."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Form, Path, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError
from sqlalchemy.orm import Session

from registry.errors import LoraplaneError, Unprocessable
from registry.names import NAME_PATTERN
from registry.request_session import RequestSession, discard
from registry.tenants import service
from registry.tenants.schemas import TenantCreate, TenantUpdate
from web.rendering import PageRoute, page, see_other
from web.session import SignedInVisit, check_csrf, viewer

router = APIRouter(route_class=PageRoute)
TENANTS_SHOWN = 200
TenantName = Path(max_length=64, pattern=NAME_PATTERN.pattern)
WAITING, SUITES = "max waiting evaluations", "max eval suites"  # the quota fields, as labelled


@router.get("/ui/tenants")
def tenants_page(request: Request, saved: str = Query("", max_length=64),
                 visit: SignedInVisit = Depends(viewer),
                 session: Session = RequestSession) -> Response:
    return _tenants_page(request, session, visit, saved=saved)


@router.post("/ui/tenants")
def create(request: Request, name: str = Form("", max_length=64),
           display_name: str = Form("", max_length=128),
           max_waiting_evaluations: str = Form("", max_length=16),
           max_suites: str = Form("", max_length=16), csrf_token: str = Form("", max_length=128),
           visit: SignedInVisit = Depends(viewer), session: Session = RequestSession) -> Response:
    check_csrf(visit, csrf_token)
    try:
        spec = _spec(TenantCreate, name=name, display_name=display_name or None,
                     max_waiting_evaluations=_quota(max_waiting_evaluations, WAITING),
                     max_suites=_quota(max_suites, SUITES))
        created = service.create(session, visit.principal, spec)
    except LoraplaneError as error:
        return _refused(request, session, visit, error)
    return see_other(f"/ui/tenants?saved={created.name}")


@router.post("/ui/tenants/{tenant}/rename")
def rename(request: Request, tenant: str = TenantName, display_name: str = Form("", max_length=128),
           csrf_token: str = Form("", max_length=128), visit: SignedInVisit = Depends(viewer),
           session: Session = RequestSession) -> Response:
    """An empty display name shows the slug again."""
    return _update(request, session, visit, csrf_token, tenant, display_name=display_name or None)


@router.post("/ui/tenants/{tenant}/disable")
def disable(request: Request, tenant: str = TenantName, csrf_token: str = Form("", max_length=128),
            visit: SignedInVisit = Depends(viewer), session: Session = RequestSession) -> Response:
    return _update(request, session, visit, csrf_token, tenant, disabled=True)


@router.post("/ui/tenants/{tenant}/enable")
def enable(request: Request, tenant: str = TenantName, csrf_token: str = Form("", max_length=128),
           visit: SignedInVisit = Depends(viewer), session: Session = RequestSession) -> Response:
    return _update(request, session, visit, csrf_token, tenant, disabled=False)


@router.post("/ui/tenants/{tenant}/quotas")
def quotas(request: Request, tenant: str = TenantName,
           max_waiting_evaluations: str = Form("", max_length=16),
           max_suites: str = Form("", max_length=16), csrf_token: str = Form("", max_length=128),
           visit: SignedInVisit = Depends(viewer), session: Session = RequestSession) -> Response:
    """An empty field goes back to the deployment default."""
    check_csrf(visit, csrf_token)
    try:
        fields = {"max_waiting_evaluations": _quota(max_waiting_evaluations, WAITING),
                  "max_suites": _quota(max_suites, SUITES)}
    except LoraplaneError as error:
        return _refused(request, session, visit, error)
    return _update(request, session, visit, csrf_token, tenant, **fields)


def _update(request: Request, session: Session, visit: SignedInVisit, csrf_token: str, tenant: str,
            **fields: Any) -> Response:
    check_csrf(visit, csrf_token)
    try:
        service.update(session, visit.principal, tenant, _spec(TenantUpdate, **fields))
    except LoraplaneError as error:
        return _refused(request, session, visit, error)
    return see_other(f"/ui/tenants?saved={tenant}")


def _tenants_page(request: Request, session: Session, visit: SignedInVisit, *, status: int = 200,
                  error: LoraplaneError | None = None, saved: str = "") -> Response:
    visit.principal.require_global_admin()
    tenants, more = service.list_tenants(session, visit.principal, limit=TENANTS_SHOWN, cursor=None)
    return page(request, visit, "tenants.html", status=status, tenants=tenants,
                more=more is not None, error=error,
                saved=saved if any(t.name == saved for t in tenants) else "")


def _refused(request: Request, session: Session, visit: SignedInVisit,
             error: LoraplaneError) -> Response:
    # The page shows the refusal, so nothing raises past the route to roll the change back:
    # undo it here, then show the tenants as they stand.
    discard(request)
    return _tenants_page(request, session, visit, status=error.status, error=error)


def _spec(model: type[BaseModel], **fields: Any) -> Any:
    try:
        return model(**fields)
    except ValidationError as invalid:
        first = invalid.errors()[0]
        where = ".".join(str(part) for part in first["loc"]).replace("_", " ")
        raise Unprocessable(f"{where}: {first['msg']}" if where else first["msg"],
                            hint="Correct the value and submit again.") from None


def _quota(value: str, label: str) -> int | None:
    """A quota field: empty for the deployment default, else a whole number."""
    value = value.strip()
    if not value:
        return None
    if not value.isdigit():
        raise Unprocessable(f"{label}: {value!r} is not a whole number",
                            hint="Enter a number from 1, or leave it empty for the default.")
    return int(value)
