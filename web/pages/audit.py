"""The audit log, filtered, with the result of verifying its hash chain."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session

from registry.audit import reading
from registry.audit.reading import AuditFilters
from registry.audit.verify import verify_chain
from registry.errors import Unprocessable
from registry.request_session import RequestSession
from web.rendering import PageRoute, page
from web.session import SignedInVisit, viewer

router = APIRouter(route_class=PageRoute)
EVENTS_SHOWN = 100


@router.get("/ui/audit")
def audit_page(request: Request, action: str = Query("", max_length=64), actor: str = Query("", max_length=128),
               subject: str = Query("", max_length=300), since: str = Query("", max_length=40),
               until: str = Query("", max_length=40), cursor: str | None = Query(None, max_length=18),
               visit: SignedInVisit = Depends(viewer), session: Session = RequestSession) -> Response:
    filters = AuditFilters(action=action or None, actor=actor or None, subject=subject or None,
                           since=_moment(since, "since"), until=_moment(until, "until"))
    events, next_cursor = reading.list_page(session, visit.principal, filters,
                                            limit=EVENTS_SHOWN, cursor=cursor)
    # The whole chain is walked once, on the first page, not again for every later page.
    chain = verify_chain(session) if visit.principal.is_global_admin and not cursor else None
    later = None
    if next_cursor:
        kept = {k: v for k, v in request.query_params.items() if k != "cursor"}
        later = "/ui/audit?" + urlencode({**kept, "cursor": next_cursor})
    return page(request, visit, "audit.html", events=events, later=later, chain=chain,
                filters={"action": action, "actor": actor, "subject": subject, "since": since, "until": until})


def _moment(value: str, field: str) -> datetime | None:
    """A time from the form's datetime-local field (read as UTC), or nothing when left empty."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise Unprocessable(f"{field}: {value!r} is not a date and time",
                            hint="Use the date picker, or write 2026-12-03T14:00.") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
