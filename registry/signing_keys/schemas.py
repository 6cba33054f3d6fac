from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from registry.names import NAME_PATTERN
from registry.signing_keys.public_keys import MAX_PEM_CHARS


class SigningKeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=64, pattern=NAME_PATTERN.pattern,
                      description="Unique in the tenant, revoked keys included.")
    public_key_pem: str = Field(max_length=MAX_PEM_CHARS, description=(
        "The public key the team signs uploads with (model-signing's key signer): an EC key on "
        "P-256, P-384 or P-521, as '-----BEGIN PUBLIC KEY-----' PEM. Never a private key."))


class SigningKeyOut(BaseModel):
    tenant: str
    name: str
    fingerprint: str = Field(description="sha256 of the DER SubjectPublicKeyInfo.")
    public_key_pem: str
    created_by: str
    created_at: datetime
    revoked_at: datetime | None


class SigningPolicyUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    require_signed_uploads: StrictBool = Field(description=(
        "Refuse every upload of the tenant that carries no model.sig by one of its keys."))


class SigningPolicyOut(BaseModel):
    tenant: str
    require_signed_uploads: bool
    active_keys: int
