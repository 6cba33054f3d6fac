from __future__ import annotations

from fastapi import APIRouter, Depends, Path
from sqlalchemy.orm import Session

from registry.auth.dependencies import authenticated
from registry.auth.principal import Principal
from registry.request_session import RequestSession
from registry.webhooks import service
from registry.webhooks.schemas import DeliveryOut, WebhookCreate, WebhookCreated, WebhookOut

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])
WebhookId = Path(ge=1, le=2**31 - 1)


@router.post("", status_code=201, response_model=WebhookCreated)
def create_webhook(spec: WebhookCreate, principal: Principal = Depends(authenticated),
                   session: Session = RequestSession):
    """Deliveries are signed with the returned secret (shown once): see registry/webhooks/signing.py."""
    return service.create(session, principal, spec)


@router.get("", response_model=list[WebhookOut])
def list_webhooks(principal: Principal = Depends(authenticated), session: Session = RequestSession):
    return service.list_all(session, principal)


@router.get("/{webhook_id}/deliveries", response_model=list[DeliveryOut])
def list_deliveries(webhook_id: int = WebhookId, principal: Principal = Depends(authenticated),
                    session: Session = RequestSession):
    return service.deliveries(session, principal, webhook_id)


@router.delete("/{webhook_id}", status_code=204)
def disable_webhook(webhook_id: int = WebhookId, principal: Principal = Depends(authenticated),
                    session: Session = RequestSession):
    service.disable(session, principal, webhook_id)
