from __future__ import annotations

from fastapi import APIRouter, Depends, Path, Query
from sqlalchemy.orm import Session

from registry.active_set.placement import reading
from registry.active_set.placement import traffic
from registry.active_set.placement.schemas import PlacementOut, TrafficReport
from registry.auth.dependencies import authenticated
from registry.auth.principal import Principal
from registry.names import NAME_PATTERN
from registry.request_session import RequestSession
from registry.active_set.placement.residency import residency
from registry.traffic_windows.schemas import RESIDENCY_WINDOW_S, ResidencyOut

router = APIRouter(prefix="/v1/pools", tags=["placement"])


@router.get("/{pool}/placement", response_model=PlacementOut)
def get_placement(pool: str, principal: Principal = Depends(authenticated),
                  session: Session = RequestSession):
    """Which nodes hold which versions, and each version's share of the traffic."""
    return reading.placement_out(session, principal, pool)


@router.get("/{pool}/residency", response_model=ResidencyOut)
def get_residency(pool: str, window_s: int = Query(RESIDENCY_WINDOW_S, ge=60, le=86400, description=(
                      "The span counted, in seconds, up to now.")),
                  principal: Principal = Depends(authenticated), session: Session = RequestSession):
    """How the pool serves its long tail: the resident hit ratio, cold loads per minute, and
    cold-load TTFT beside warm TTFT, from the routers' traffic reports."""
    return residency(session, principal, pool, window_s)


@router.put("/{pool}/routers/{router_id}/traffic", status_code=204)
def report_traffic(body: TrafficReport, pool: str,
                   router_id: str = Path(max_length=64, pattern=NAME_PATTERN.pattern),
                   principal: Principal = Depends(authenticated), session: Session = RequestSession):
    """A router's recent requests per second by served name (placement sizes replicas by it),
    and what it saw of each served name since its last report (canary analysis reads it)."""
    traffic.record_traffic(session, principal, pool, router_id, body.requests_per_s,
                           report_id=body.report_id, windows=body.windows)
