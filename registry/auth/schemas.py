from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from registry.auth.principal import Role
from registry.names import NAME_PATTERN


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    subject: str = Field(min_length=1, max_length=128, pattern=r"^[^\x00-\x1f\x7f]+$",
                         description="The person or service.")
    role: Role
    tenant: str | None = Field(default=None, max_length=64)
    pool: str | None = Field(default=None, max_length=64, pattern=NAME_PATTERN.pattern,
                             description="A node or router token's pool.")
    tier: Literal["interactive", "batch"] | None = Field(
        default=None, description="An app key's SLO tier (default interactive).")


class TokenCreated(BaseModel):
    id: int
    subject: str
    role: Role
    tenant: str | None
    pool: str | None = None
    tier: str | None = None
    token: str = Field(description="Shown once; only its hash is stored.")


class WhoAmI(BaseModel):
    subject: str
    role: Role
    tenant: str | None
    pool: str | None = None
    tier: str | None = None
