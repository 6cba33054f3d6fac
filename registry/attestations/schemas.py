from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class AttestationOut(BaseModel):
    id: int
    pool: str
    action: str = Field(description="approve | rollback | resign (same statement, new key) | backfill")
    key_id: str
    created_at: datetime
    audit_event_hash: str | None = Field(description="The audit event of the change it attests.")
    statement_sha256: str
    verified: bool = Field(description="Whether it verifies against the current trust bundle.")
    problem: str | None = Field(None, description="Why it does not verify, when it does not.")
    statement: dict[str, Any] = Field(description="The in-toto statement inside the envelope.")
    envelope: dict[str, Any] = Field(description="The DSSE envelope, as nodes receive it.")


class RotationIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    overlap_s: int | None = Field(None, ge=1, le=365 * 86400, description=(
        "How long the retired key stays trusted; the deployment's default when absent, and "
        "never less than its LORAPLANE_ATTESTATION_MIN_OVERLAP_S."))
    emergency: bool = Field(False, description=(
        "The current key is compromised: its trust ends now, without an overlap. Nodes pinned on "
        "it take the next bundle (which it signs, naming its own end) and refuse it from then on."))


class BackfillOut(BaseModel):
    attested: int = Field(description="Active versions that had no attestation and have one now.")


class RotationOut(BaseModel):
    retired_key_id: str
    key_id: str
    retired_key_trusted_until: datetime
    resigned: int = Field(description="Active attestations signed again with the new key.")
    emergency: bool = False
