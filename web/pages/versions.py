"""A version's page: its metadata and validation report, then its evaluations' evidence."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session

from registry.adapters import service as adapters
from registry.attestations import reading as attestations
from registry.auth.principal import Principal
from registry.evaluations import service as evaluations
from registry.request_session import RequestSession
from registry.requalification import service as requalification
from web.evidence import evidence_of
from web.rendering import PageRoute, page
from web.session import SignedInVisit, viewer

router = APIRouter(route_class=PageRoute)
NAME = r"^[a-z0-9](?:[a-z0-9_-]{0,62}[a-z0-9])?$"
EXAMPLES_SHOWN, EVALUATIONS_SHOWN = 100, 20


@router.get("/ui/adapters/{tenant}/{name}/versions/{number}")
def version_page(request: Request, tenant: str = Path(pattern=NAME), name: str = Path(pattern=NAME),
                 number: int = Path(ge=1, le=2**31 - 1), visit: SignedInVisit = Depends(viewer),
                 session: Session = RequestSession) -> Response:
    view = version_view(session, visit.principal, tenant, name, number)
    return page(request, visit, "version.html", **view)


def version_view(session: Session, principal: Principal, tenant: str, name: str, number: int) -> dict:
    version = adapters.get_version(session, principal, tenant, name, number)
    listed, _ = evaluations.list_for_version(session, principal, tenant, name, number,
                                             limit=EVALUATIONS_SHOWN, cursor=None)
    full = [evaluations.get(session, principal, e.id, examples_limit=EXAMPLES_SHOWN, examples_cursor=None)
            for e in listed]
    # get_version has checked the viewer may see this version, and so its marks.
    marks = requalification.marks_of_version(
        session, principal, adapters.find_version(session, tenant, name, number).id)
    card = adapters.find_version(session, tenant, name, number).model_card
    evidence = [evidence_of(e, _incumbent_of(session, principal, e)) for e in full]
    return {"version": version, "model_card": card, "evidence": evidence,
            "requalifications": marks,
            "provenance": _newest_per_pool(attestations.of_version(session, principal, tenant, name, number))}


def _incumbent_of(session: Session, principal: Principal, evaluation):
    """The incumbent's evaluation a challenger's ran beside (same adapter, so readable alike)."""
    if evaluation.pair is None or evaluation.pair.role != "challenger":
        return None
    return evaluations.get(session, principal, evaluation.pair.other_evaluation_id,
                           examples_limit=EXAMPLES_SHOWN, examples_cursor=None)


def _newest_per_pool(listed: list) -> list:
    newest = {a.pool: a for a in listed}  # listed oldest first
    return sorted(newest.values(), key=lambda a: a.pool)
