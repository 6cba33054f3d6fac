"""Find adapters among hundreds: a name search and filters by tenant, base model, state and
pool, a page at a time. A tenant's people see their own tenant's adapters only."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session

from registry.adapters import rules
from registry.adapters import service
from registry.pagination import MAX_CURSOR_CHARS, MAX_LIMIT
from registry.request_session import RequestSession
from web.rendering import PageRoute, page
from web.session import SignedInVisit, viewer

router = APIRouter(route_class=PageRoute)
ADAPTERS_SHOWN = 50


@router.get("/ui/adapters")
def adapters_page(request: Request, q: str = Query("", max_length=64),
                  tenant: str = Query("", max_length=64), base_model: str = Query("", max_length=200),
                  state: str = Query("", max_length=16), pool: str = Query("", max_length=64),
                  cursor: str | None = Query(None, max_length=MAX_CURSOR_CHARS),
                  limit: int = Query(ADAPTERS_SHOWN, ge=1, le=MAX_LIMIT),
                  visit: SignedInVisit = Depends(viewer), session: Session = RequestSession) -> Response:
    adapters, next_cursor = service.list_adapters(
        session, visit.principal, tenant=tenant.strip() or None, base_model=base_model.strip() or None,
        limit=limit, cursor=cursor, name_contains=q, state=state or None,
        pool=pool.strip() or None)
    later = None
    if next_cursor:
        kept = {k: v for k, v in request.query_params.items() if k != "cursor" and v}
        later = "/ui/adapters?" + urlencode({**kept, "cursor": next_cursor})
    return page(request, visit, "adapters.html", adapters=adapters, later=later,
                states=rules.ADAPTER_STATES, filters={"q": q, "tenant": tenant, "base_model": base_model,
                                                      "state": state, "pool": pool})
