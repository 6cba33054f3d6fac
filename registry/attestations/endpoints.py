"""The trust bundle at its well-known URL (public: it holds public keys only), a version's
attestations, and key rotation."""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from loraplane.provenance import TRUST_BUNDLE_PATH
from registry.adapters.endpoints import Name, Number, Tenant
from registry.attestations import reading, service
from registry.attestations.keyring import RotationUnsupported
from registry.attestations.schemas import AttestationOut, RotationIn, RotationOut
from registry.auth.dependencies import authenticated
from registry.auth.principal import Principal
from registry.db import transaction
from registry.errors import Conflict
from registry.settings import get_settings

router = APIRouter(tags=["attestations"])


@router.get(TRUST_BUNDLE_PATH, summary="The public keys that sign attestations (anonymous)")
def trust_bundle():
    return JSONResponse(service.trust_bundle(), headers={"Cache-Control": "no-cache"})


@router.get("/v1/adapters/{tenant}/{name}/versions/{number}/attestations",
            response_model=list[AttestationOut])
def list_attestations(tenant: str = Tenant, name: str = Name, number: int = Number,
                      principal: Principal = Depends(authenticated)):
    with transaction() as session:
        return reading.of_version(session, principal, tenant, name, number)


@router.post("/v1/attestation-keys/rotate", response_model=RotationOut)
def rotate_key(spec: RotationIn, principal: Principal = Depends(authenticated)):
    principal.require_global_admin()
    overlap = timedelta(seconds=spec.overlap_s if spec.overlap_s is not None
                        else get_settings().attestation_key_overlap_s)
    try:
        with transaction() as session:
            return service.rotate(session, principal, overlap)
    except RotationUnsupported as error:
        raise Conflict(f"this registry cannot rotate its attestation key: {error}",
                       code="rotation_unsupported",
                       hint="Deploy a new key where it comes from, then restart the registry.") from None
