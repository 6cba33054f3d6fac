from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from sqlalchemy.orm import Session

from registry.auth.dependencies import authenticated
from registry.auth.principal import Principal, Role
from registry.request_session import RequestSession
from registry.sizing import service
from registry.sizing.schemas import SizingInputs, SizingOut

router = APIRouter(prefix="/v1/pools", tags=["sizing"])


@router.get("/{pool}/sizing", response_model=SizingOut)
def get_sizing(
    pool: str,
    # Lower bounds keep every count finite and every cost above zero, so ratios can divide.
    gpu_hour_usd: float | None = Query(None, ge=0.01, le=1000, description="Price of a GPU hour."),
    gpu_memory_gib: float | None = Query(None, ge=1, le=4096, description="Memory of one GPU."),
    tokens_per_s: float | None = Query(None, ge=1, le=1e7,
                                       description="Throughput of one GPU replica of the base."),
    lora_throughput_penalty: float | None = Query(
        None, ge=0, lt=1, description="Throughput lost to multi-LoRA kernels (0.05-0.15)."),
    demand_tokens_per_s: float | None = Query(
        None, ge=1, le=1e9, description="Total demand across adapters (default: tokens_per_s)."),
    weights_fraction: float | None = Query(
        None, ge=0.01, le=1, description="Share of a GPU's memory the weights may take."),
    adapters: int | None = Query(None, ge=1, le=100_000,
                                 description="Adapters to serve (default: the active set)."),
    principal: Principal = Depends(authenticated),
    session: Session = RequestSession,
):
    """LoRA slot memory, what an oversized max_lora_rank wastes, and multi-LoRA against one full
    replica per adapter; each figure is labelled measured or assumed."""
    principal.require({Role.ADMIN, Role.UPLOADER, Role.REVIEWER})
    inputs = SizingInputs(
        gpu_hour_usd=gpu_hour_usd, gpu_memory_gib=gpu_memory_gib, tokens_per_s=tokens_per_s,
        lora_throughput_penalty=lora_throughput_penalty, demand_tokens_per_s=demand_tokens_per_s,
        weights_fraction=weights_fraction, adapters=adapters)
    return service.size_pool(session, pool, inputs, principal.tenant)
