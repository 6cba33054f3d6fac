from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from sqlalchemy.orm import Session

from registry.adapters.endpoints import Name, Number, Tenant
from registry.adapters.schemas import AdapterOut, VersionOut
from registry.auth.dependencies import authenticated
from registry.auth.principal import Principal
from registry.lifecycle import service
from registry.request_session import RequestSession

router = APIRouter(prefix="/v1/adapters", tags=["adapters"])
REFUSALS: dict[int | str, dict[str, Any]] = {409: {"description": (
    "Something still holds it: an active set, an undecided promotion; for a delete also an "
    "unfinished evaluation or an attestation that still verifies. The error's code and hint say "
    "which, and what to do.")}}


@router.post("/{tenant}/{name}/retire", response_model=AdapterOut, responses=REFUSALS)
def retire_adapter(tenant: str = Tenant, name: str = Name, principal: Principal = Depends(authenticated),
                   session: Session = RequestSession):
    """Retire the adapter and every version of it: none is promoted, rolled back to or evaluated
    again, and no new version is taken; everything is kept for the record. The tenant's admins
    and uploaders. Retiring again changes nothing."""
    return service.retire_adapter(session, principal, tenant, name)


@router.delete("/{tenant}/{name}", response_model=AdapterOut, responses=REFUSALS)
def delete_adapter(tenant: str = Tenant, name: str = Name, principal: Principal = Depends(authenticated),
                   session: Session = RequestSession):
    """Delete every version of the adapter (see deleting a version) and the adapter: its rows and
    audit trail stay, its name is never used again. The tenant's admins and uploaders."""
    return service.delete_adapter(session, principal, tenant, name)


@router.post("/{tenant}/{name}/versions/{number}/retire", response_model=VersionOut, responses=REFUSALS)
def retire_version(tenant: str = Tenant, name: str = Name, number: int = Number,
                   principal: Principal = Depends(authenticated), session: Session = RequestSession):
    """Retire one version: never promoted, rolled back to or evaluated again; kept whole for the
    record. The tenant's admins and uploaders. Retiring again changes nothing."""
    return service.retire_version(session, principal, tenant, name, number)


@router.delete("/{tenant}/{name}/versions/{number}", response_model=VersionOut, responses=REFUSALS)
def delete_version(tenant: str = Tenant, name: str = Name, number: int = Number,
                   principal: Principal = Depends(authenticated), session: Session = RequestSession):
    """Delete one version: its manifest, model card and signature record are cleared and its
    blobs released (the housekeeper collects those nothing else names after
    LORAPLANE_BLOB_GC_GRACE_S). The row, digest and audit trail stay; the same bytes are never
    taken again under this adapter. The tenant's admins and uploaders."""
    return service.delete_version(session, principal, tenant, name, number)
