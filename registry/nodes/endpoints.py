from __future__ import annotations

from fastapi import APIRouter, Depends, Path
from sqlalchemy.orm import Session

from registry.auth.dependencies import authenticated
from registry.auth.principal import Principal
from registry.nodes import service
from registry.nodes.schemas import NodeAddressIn, NodeAddressOut, NodeOut, NodeReport, RolloutOut
from registry.request_session import RequestSession

router = APIRouter(prefix="/v1/pools", tags=["nodes"])


@router.put("/{pool}/nodes/{node_id}/status", response_model=NodeOut)
def report_status(body: NodeReport, pool: str, node_id: str = Path(max_length=64),
                  principal: Principal = Depends(authenticated), session: Session = RequestSession):
    """An agent's report after each pass: the generation applied, what is loaded, what failed."""
    return service.report(session, principal, pool, node_id, body)


@router.get("/{pool}/rollout", response_model=RolloutOut)
def get_rollout(pool: str, principal: Principal = Depends(authenticated),
                session: Session = RequestSession):
    """Which node has applied which generation, drift, failures and stale nodes."""
    return service.rollout(session, principal, pool)


@router.put("/{pool}/nodes/{node_id}/address", response_model=NodeAddressOut)
def bind_address(body: NodeAddressIn, pool: str, node_id: str = Path(max_length=64),
                 principal: Principal = Depends(authenticated), session: Session = RequestSession):
    """Bind or move a node's vLLM address (global admins): routers send prompts only there."""
    return service.bind_address(session, principal, pool, node_id, str(body.vllm_url))
