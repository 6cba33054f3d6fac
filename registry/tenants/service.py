"""Tenants: created by a global admin (or with their first token), renamed, disabled and given
quotas of their own. Global admins see and change every tenant; a tenant's admins read their
own. Every change is audited.

The name is the slug in served names (tenant/adapter@N), signed active sets, attestations and
audit subjects, so it never changes: a rename changes the display name only."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from registry import audit
from registry.auth import repository as lookup
from registry.auth.principal import Principal, Role
from registry.errors import Conflict, NotFound
from registry.names import check_name
from registry.settings import get_settings
from registry.tables import Tenant
from registry.tenants import repository
from registry.tenants.schemas import (
    QuotaOut, TenantCreate, TenantOut, TenantQuotas, TenantUpdate,
)

CHANGEABLE = ("display_name", "disabled", "max_waiting_evaluations", "max_suites")


def create(session: Session, principal: Principal, spec: TenantCreate) -> TenantOut:
    principal.require_global_admin()
    name = check_name(spec.name, "tenant")
    if lookup.find_tenant(session, name) is not None:
        raise _taken(name)
    row = Tenant(name=name, display_name=spec.display_name,
                 max_waiting_evaluations=spec.max_waiting_evaluations, max_suites=spec.max_suites)
    try:
        with session.begin_nested():  # another registry creating the same tenant at once
            session.add(row)
    except IntegrityError:
        raise _taken(name) from None
    return _record_created(session, row, actor=principal.label)


def create_for_token(session: Session, name: str, *, actor: str) -> Tenant:
    """A tenant made by its first token's issuing (loraplane token create --tenant NEW), audited
    as any other creation."""
    row = Tenant(name=check_name(name, "tenant"))
    session.add(row)
    session.flush()
    _record_created(session, row, actor=actor)
    return row


def list_tenants(session: Session, principal: Principal, *, limit: int,
                 cursor: str | None) -> tuple[list[TenantOut], str | None]:
    """Every tenant for a global admin; a tenant admin's own only."""
    principal.require({Role.ADMIN})
    rows, next_cursor = repository.page_of_tenants(
        session, name=None if principal.is_global_admin else principal.tenant, limit=limit,
        cursor=cursor)
    return _outs(session, rows), next_cursor


def get(session: Session, principal: Principal, tenant: str) -> TenantOut:
    return to_out(session, _tenant_for(session, principal, tenant, {Role.ADMIN}))


def update(session: Session, principal: Principal, tenant: str, spec: TenantUpdate) -> TenantOut:
    """Only the fields sent change; a quota sent as null goes back to the deployment default.
    Disabling refuses every token of the tenant at once (registry/auth/tokens.py) and keeps
    them: enabling restores those neither revoked nor expired meanwhile. Safe to repeat."""
    row = _tenant_for(session, principal, tenant, set(), lock=True)
    before_all = _changeable(row)
    sent = spec.model_dump(include=spec.model_fields_set)
    if sent.get("disabled") is False:
        row.disabled_at = None
    elif sent.get("disabled") and row.disabled_at is None:  # disabling again keeps the first time
        row.disabled_at = datetime.now(UTC)
    for field in ("display_name", "max_waiting_evaluations", "max_suites"):
        if field in sent:
            setattr(row, field, sent[field])
    after_all = _changeable(row)
    changed = [field for field in CHANGEABLE if before_all[field] != after_all[field]]
    if changed:
        session.flush()
        audit.record(session, actor=principal.label, action="tenant.updated",
                     subject=f"tenant/{row.name}", tenant_id=row.id,
                     before={field: before_all[field] for field in changed},
                     after={field: after_all[field] for field in changed})
    return to_out(session, row)


def to_out(session: Session, row: Tenant) -> TenantOut:
    return _outs(session, [row])[0]


def _outs(session: Session, rows: list[Tenant]) -> list[TenantOut]:
    """Two queries for the counts of the whole page, not two per tenant."""
    ids = [row.id for row in rows]
    adapters = repository.adapter_counts(session, ids) if ids else {}
    tokens = repository.active_token_counts(session, ids, datetime.now(UTC)) if ids else {}
    settings = get_settings()
    return [TenantOut(
        name=row.name, display_name=row.display_name, disabled=row.disabled_at is not None,
        disabled_at=row.disabled_at, require_signed_uploads=row.require_signed_uploads,
        quotas=TenantQuotas(
            max_waiting_evaluations=_quota(row.max_waiting_evaluations,
                                           settings.tenant_max_waiting_evaluations),
            max_suites=_quota(row.max_suites, settings.tenant_max_suites)),
        adapters=adapters.get(row.id, 0), active_tokens=tokens.get(row.id, 0),
        created_at=row.created_at) for row in rows]


def _quota(own: int | None, default: int) -> QuotaOut:
    return QuotaOut(own=own, default=default, effective=default if own is None else own)


def _tenant_for(session: Session, principal: Principal, tenant: str, roles: set[Role], *,
                lock: bool = False) -> Tenant:
    """The tenant, once the caller may act on it (before anything says whether it exists)."""
    principal.require(roles, check_name(tenant, "tenant"))
    row = lookup.lock_tenant(session, tenant) if lock else lookup.find_tenant(session, tenant)
    if row is None:
        raise NotFound(f"tenant {tenant!r} does not exist", code="tenant_not_found",
                       hint="List them with GET /v1/tenants (loraplane tenant list).")
    return row


def _changeable(row: Tenant) -> dict:
    return {"display_name": row.display_name, "disabled": row.disabled_at is not None,
            "max_waiting_evaluations": row.max_waiting_evaluations, "max_suites": row.max_suites}


def _record_created(session: Session, row: Tenant, *, actor: str) -> TenantOut:
    session.flush()
    return audit.record_created(session, to_out(session, row), actor=actor, action="tenant.created",
                                subject=f"tenant/{row.name}", tenant_id=row.id)


def _taken(name: str) -> Conflict:
    return Conflict(f"tenant {name!r} already exists", code="already_exists",
                    hint="Names are never reused; pick another, or change this one's display name "
                         "(PATCH /v1/tenants/NAME).")
