"""The trust bundle at its well-known URL (public: it holds public keys only), a version's
attestations, key rotation, and the backfill an upgrade asks for."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session

from registry.adapters.endpoints import Name, Number, Tenant
from registry.attestation_keys import bundle
from registry.attestations import reading, upkeep
from registry.attestations.schemas import AttestationOut, BackfillOut, RotationIn, RotationOut
from registry.auth.dependencies import authenticated
from registry.auth.principal import Principal
from registry.request_session import RequestSession
from signed_digests.provenance import TRUST_BUNDLE_PATH

router = APIRouter(tags=["attestations"])


@router.get(TRUST_BUNDLE_PATH, summary="The public keys that sign attestations (anonymous)")
def trust_bundle():
    return JSONResponse(bundle.trust_bundle(), headers={"Cache-Control": "no-cache"})


@router.get("/v1/adapters/{tenant}/{name}/versions/{number}/attestations",
            response_model=list[AttestationOut])
def list_attestations(tenant: str = Tenant, name: str = Name, number: int = Number,
                      principal: Principal = Depends(authenticated), session: Session = RequestSession):
    return reading.of_version(session, principal, tenant, name, number)


@router.post("/v1/attestation-keys/rotate", response_model=RotationOut)
def rotate_key(spec: RotationIn, principal: Principal = Depends(authenticated),
               session: Session = RequestSession):
    """A new signing key (global admins): the retired one stays trusted for the overlap, or, in an
    emergency, not at all; every active version is signed again with the new key at once."""
    return upkeep.rotate(session, principal, spec.overlap_s, spec.emergency)


@router.post("/v1/attestations/backfill", response_model=BackfillOut)
def backfill(principal: Principal = Depends(authenticated), session: Session = RequestSession):
    """Attest active versions approved before this registry signed attestations (an upgrade)."""
    return BackfillOut(attested=upkeep.backfill(session, principal))
