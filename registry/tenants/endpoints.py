from __future__ import annotations

from fastapi import APIRouter, Depends, Path
from sqlalchemy.orm import Session

from registry.auth.dependencies import authenticated
from registry.auth.principal import Principal
from registry.names import NAME_PATTERN
from registry.page_query import paging
from registry.pagination import PageRequest
from registry.request_session import RequestSession
from registry.tenants import service
from registry.tenants.schemas import TenantCreate, TenantOut, TenantPage, TenantUpdate

router = APIRouter(prefix="/v1/tenants", tags=["tenants"])
# The pattern is documented here and enforced by check_name, which gives the clearer error.
TenantName = Path(max_length=64, json_schema_extra={"pattern": NAME_PATTERN.pattern})


@router.post("", status_code=201, response_model=TenantOut)
def create_tenant(spec: TenantCreate, principal: Principal = Depends(authenticated),
                  session: Session = RequestSession):
    """Global admins only. A tenant is also made by the first token a global admin issues for a
    new name (loraplane token create --tenant NAME)."""
    return service.create(session, principal, spec)


@router.get("", response_model=TenantPage)
def list_tenants(page: PageRequest = paging(default_limit=100),
                 principal: Principal = Depends(authenticated), session: Session = RequestSession):
    """Every tenant for a global admin; a tenant admin sees its own only. Quotas show the
    tenant's own value, the deployment default and the one that applies."""
    items, next_cursor = service.list_tenants(session, principal, limit=page.limit,
                                              cursor=page.cursor)
    return TenantPage(items=items, next_cursor=next_cursor)


@router.get("/{tenant}", response_model=TenantOut)
def get_tenant(tenant: str = TenantName, principal: Principal = Depends(authenticated),
               session: Session = RequestSession):
    """Global admins, and the tenant's own admins."""
    return service.get(session, principal, tenant)


@router.patch("/{tenant}", response_model=TenantOut)
def update_tenant(spec: TenantUpdate, tenant: str = TenantName,
                  principal: Principal = Depends(authenticated), session: Session = RequestSession):
    """Global admins only. Rename (display_name), disable or enable, and set the tenant's own
    quotas (null: back to the deployment default). Only the fields sent change.

    The name itself never changes: it is the slug in served names (tenant/adapter@N), signed
    active sets, attestations and audit subjects, so a rename changes the display name only.

    Disabling refuses every token of the tenant at once (401 tenant_disabled), dashboard
    sessions and long-polls included, and the issuing of new ones; enabling restores the
    tokens neither revoked nor expired meanwhile."""
    return service.update(session, principal, tenant, spec)
