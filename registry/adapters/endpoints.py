from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Path, Query
from fastapi.responses import PlainTextResponse
from sqlalchemy.orm import Session

from registry.adapters import service
from registry.adapters.schemas import AdapterOut, DownloadOut, VersionOut
from registry.auth.dependencies import authenticated
from registry.auth.principal import Principal
from registry.names import NAME_PATTERN
from registry.page_query import Paging
from registry.pagination import Page, PageRequest
from registry.request_session import RequestSession
from registry.settings import get_settings
from registry.storage import get_store

router = APIRouter(prefix="/v1/adapters", tags=["adapters"])
# The pattern is documented here and enforced by check_name, which gives the clearer error.
Tenant = Path(max_length=64, json_schema_extra={"pattern": NAME_PATTERN.pattern})
Name = Path(max_length=64, json_schema_extra={"pattern": NAME_PATTERN.pattern})
Number = Path(ge=1, le=2**31 - 1)


@router.get("", response_model=Page[AdapterOut])
def list_adapters(
    tenant: str | None = Query(None, max_length=64),
    base_model: str | None = Query(None, max_length=200),
    q: str | None = Query(None, max_length=64, description="A substring of the adapter's name."),
    state: str | None = Query(None, max_length=16, description="active, retired or deleted."),
    pool: str | None = Query(None, max_length=64, description=(
        "Only adapters a version of which the pool serves or is still retiring.")),
    page: PageRequest = Paging,
    principal: Principal = Depends(authenticated),
    session: Session = RequestSession,
):
    """A tenant's people see their own tenant's adapters; a global admin every tenant's."""
    return Page.of(service.list_adapters(session, principal, tenant=tenant, base_model=base_model,
                                         limit=page.limit, cursor=page.cursor, name_contains=q,
                                         state=state, pool=pool))


@router.get("/{tenant}/{name}", response_model=AdapterOut)
def get_adapter(tenant: str = Tenant, name: str = Name, principal: Principal = Depends(authenticated),
                session: Session = RequestSession):
    return service.get_adapter(session, principal, tenant, name)


@router.get("/{tenant}/{name}/versions", response_model=Page[VersionOut])
def list_versions(
    tenant: str = Tenant,
    name: str = Name,
    state: str | None = Query(None, max_length=32),
    page: PageRequest = Paging,
    principal: Principal = Depends(authenticated),
    session: Session = RequestSession,
):
    return Page.of(service.list_versions(session, principal, tenant, name, state=state,
                                         limit=page.limit, cursor=page.cursor))


@router.get("/{tenant}/{name}/versions/{number}", response_model=VersionOut)
def get_version(
    tenant: str = Tenant, name: str = Name, number: int = Number,
    principal: Principal = Depends(authenticated), session: Session = RequestSession,
):
    return service.get_version(session, principal, tenant, name, number)


@router.get("/{tenant}/{name}/versions/{number}/model-card", response_class=PlainTextResponse,
            responses={200: {"content": {"text/markdown": {}},
                             "description": "The README.md uploaded beside the adapter."}})
def get_model_card(
    tenant: str = Tenant, name: str = Name, number: int = Number,
    principal: Principal = Depends(authenticated), session: Session = RequestSession,
):
    # Uploaded text: never sniffed as HTML, and sandboxed should a browser render it anyway.
    return PlainTextResponse(service.card_of(session, principal, tenant, name, number),
                             media_type="text/markdown; charset=utf-8",
                             headers={"X-Content-Type-Options": "nosniff", "Content-Security-Policy": "sandbox"})


@router.get("/{tenant}/{name}/versions/{number}/download", response_model=DownloadOut)
def download_version(
    tenant: str = Tenant, name: str = Name, number: int = Number,
    artifact: Literal["served", "uploaded"] = Query(
        "served", description="served: what nodes serve; uploaded: the files as uploaded (they "
                              "differ when the version was uploaded with fold_scaling)"),
    principal: Principal = Depends(authenticated), session: Session = RequestSession,
):
    return service.download(session, get_store(), get_settings(), principal, tenant, name, number,
                            uploaded=artifact == "uploaded")
