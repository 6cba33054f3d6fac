"""Register webhooks, and write one outbox row per matching webhook in the transaction of the
event itself: an event is delivered only if it happened, and always if it did."""

from __future__ import annotations

import secrets
from urllib.parse import urlsplit
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from registry import audit, pending_work
from registry.auth import repository as tenants
from registry.auth.principal import Principal, Role
from registry.errors import NotFound, Unprocessable
from registry.rows import existing
from registry.settings import get_settings
from registry.tables import Tenant, Webhook, WebhookDelivery
from registry.webhooks import destinations, repository
from registry.webhooks.schemas import EVENTS, DeliveryOut, WebhookCreate, WebhookCreated, WebhookOut

PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"


def create(session: Session, principal: Principal, spec: WebhookCreate) -> WebhookCreated:
    principal.require({Role.ADMIN}, spec.tenant)
    if spec.tenant is None:
        principal.require_global_admin()
    unknown = sorted(set(spec.events) - {*EVENTS, "*"})
    if unknown:
        raise Unprocessable(f"unknown webhook events: {', '.join(unknown)}", code="unknown_event",
                            hint=f"Use any of {', '.join(EVENTS)}, or '*'.")
    internal = destinations.url_refusal(str(spec.url), get_settings().webhook_allowed_networks)
    if internal:
        raise Unprocessable(f"webhook URL refused: {internal}", code="internal_webhook_url",
                            hint="Point it at a globally routable address, or list its network in "
                                 "LORAPLANE_WEBHOOK_ALLOWED_NETWORKS.")
    tenant = _tenant(session, spec.tenant) if spec.tenant else None
    row = Webhook(url=str(spec.url), tenant_id=tenant.id if tenant else None,
                  events=sorted(set(spec.events)), secret="whsec_" + secrets.token_urlsafe(32),
                  created_by=principal.label)
    session.add(row)
    session.flush()
    # Only where it points: a receiver's path or query often holds a secret of its own, and the
    # audit log keeps what it is given for ever.
    audit.record(session, actor=principal.label, action="webhook.create", subject=f"webhook/{row.id}",
                 tenant_id=row.tenant_id, after={"url": _origin(row.url), "events": row.events})
    return WebhookCreated(**_out(session, row).model_dump(), secret=row.secret)


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}/…"


def list_all(session: Session, principal: Principal) -> list[WebhookOut]:
    principal.require({Role.ADMIN})
    tenant = principal.tenant  # an admin without a tenant is a global admin
    tenant_id = None if tenant is None else _tenant(session, tenant).id
    return [_out(session, row) for row in repository.enabled_webhooks(session, tenant_id=tenant_id)]


def deliveries(session: Session, principal: Principal, webhook_id: int) -> list[DeliveryOut]:
    row = _visible(session, principal, webhook_id)
    rows = repository.recent_deliveries(session, row.id, limit=200)
    return [DeliveryOut.model_validate(d, from_attributes=True) for d in rows]


def disable(session: Session, principal: Principal, webhook_id: int) -> None:
    row = _visible(session, principal, webhook_id)
    row.disabled_at = datetime.now(UTC)
    audit.record(session, actor=principal.label, action="webhook.disable", subject=f"webhook/{row.id}",
                 tenant_id=row.tenant_id)


def emit(session: Session, event: str, *, tenant_id: int | None, data: dict[str, Any]) -> None:
    created = []
    for hook in repository.listening_to(session, tenant_id):
        if "*" not in hook.events and event not in hook.events:
            continue
        delivery = WebhookDelivery(webhook_id=hook.id, event=event, state=PENDING, attempts=0,
                                   payload={"event": event, "at": datetime.now(UTC).isoformat(),
                                            "data": data})
        session.add(delivery)
        created.append(delivery)
    if created:
        session.flush()
        # Receivers keep the audit chain's head, signed, outside the registry's database: a chain
        # rewritten later no longer holds it (see registry/audit/anchor.py). The commit adds it
        # (add_audit_head), then queues the deliveries.
        pending_work.of(session).webhook_deliveries.extend(created)


def add_audit_head(deliveries: list[WebhookDelivery], head: dict[str, Any] | None) -> None:
    """Step 3 of a commit: the chain's signed head, with this transaction's events, into each
    delivery's payload."""
    for delivery in deliveries:
        delivery.payload = {**delivery.payload, "audit_head": head}


def _visible(session: Session, principal: Principal, webhook_id: int) -> Webhook:
    principal.require({Role.ADMIN})
    row = session.get(Webhook, webhook_id)
    tenant = principal.tenant  # an admin without a tenant is a global admin
    if row is None or not (tenant is None or (
            row.tenant_id is not None and row.tenant_id == _tenant(session, tenant).id)):
        raise NotFound(f"webhook {webhook_id} does not exist", code="webhook_not_found",
                       hint="List webhooks with GET /v1/webhooks.")
    return row


def _tenant(session: Session, name: str) -> Tenant:
    row = tenants.find_tenant(session, name)
    if row is None:
        raise NotFound(f"tenant {name!r} does not exist", code="tenant_not_found")
    return row


def _out(session: Session, row: Webhook) -> WebhookOut:
    tenant = existing(session, Tenant, row.tenant_id).name if row.tenant_id else None
    return WebhookOut(id=row.id, url=row.url, events=row.events, tenant=tenant,
                      created_by=row.created_by, created_at=row.created_at)
