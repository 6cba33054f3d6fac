from __future__ import annotations

from fastapi import APIRouter, Depends, Path
from sqlalchemy.orm import Session

from registry.active_set.placement import reading
from registry.active_set.placement import traffic
from registry.active_set.placement.schemas import PlacementOut, TrafficReport
from registry.auth.dependencies import authenticated
from registry.auth.principal import Principal
from registry.names import NAME_PATTERN
from registry.request_session import RequestSession

router = APIRouter(prefix="/v1/pools", tags=["placement"])


@router.get("/{pool}/placement", response_model=PlacementOut)
def get_placement(pool: str, principal: Principal = Depends(authenticated),
                  session: Session = RequestSession):
    """Which nodes hold which versions, and each version's share of the traffic."""
    return reading.placement_out(session, principal, pool)


@router.put("/{pool}/routers/{router_id}/traffic", status_code=204)
def report_traffic(body: TrafficReport, pool: str,
                   router_id: str = Path(max_length=64, pattern=NAME_PATTERN.pattern),
                   principal: Principal = Depends(authenticated), session: Session = RequestSession):
    """A router's recent requests per second by served name (placement sizes replicas by it),
    and what it saw of each served name since its last report (canary analysis reads it)."""
    traffic.record_traffic(session, principal, pool, router_id, body.requests_per_s,
                           report_id=body.report_id, windows=body.windows)
