from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from registry.auth.principal import Role
from registry.names import NAME_PATTERN
from registry.nodes.schemas import NodeAddressUrl

# Letters and digits of any script, and a few separators: no parentheses or commas that could
# forge the "(role@scope, identity N, token M)" part of an audit actor, and no invisible or
# direction-changing characters (Unicode format characters are not word characters).
SUBJECT_PATTERN = r"^\w[\w .@'+-]{0,127}$"


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    subject: str = Field(min_length=1, max_length=128, pattern=SUBJECT_PATTERN,
                         description="The person or service: letters, digits, spaces and . _ @ ' + -")
    role: Role
    tenant: str | None = Field(default=None, max_length=64)
    pool: str | None = Field(default=None, max_length=64, pattern=NAME_PATTERN.pattern,
                             description="A node or router token's pool.")
    instance_id: str | None = Field(
        default=None, max_length=64, pattern=NAME_PATTERN.pattern,
        description="A node token's node id, or a router token's router id: the only one it may "
                    "report for.")
    vllm_url: NodeAddressUrl | None = Field(
        default=None, description="A node token's vLLM address, as routers reach it: routers send "
                                  "prompts only there. Required for a node's first token.")
    tier: Literal["interactive", "batch"] | None = Field(
        default=None, description="An app key's SLO tier (default interactive).")
    identity_id: int | None = Field(
        default=None, ge=1, le=2**31 - 1,
        description="Issue another token to this existing identity (same tenant); omit to make "
                    "a new identity.")
    ttl_days: int | None = Field(default=None, ge=1, le=3650,
                                 description="Lifetime in days (default LORAPLANE_TOKEN_TTL_DAYS).")


class TokenOut(BaseModel):
    id: int
    subject: str
    role: Role
    tenant: str | None
    pool: str | None = None
    instance_id: str | None = None
    tier: str | None = None
    identity_id: int
    identity_name: str
    issued_by_token_id: int | None = Field(
        default=None, description="The token that issued this one; null when an operator did.")
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None = None


class TokenCreated(TokenOut):
    token: str = Field(description="Shown once; only its hash is stored.")


class TokenPage(BaseModel):
    items: list[TokenOut]
    next_cursor: str | None = None


class WhoAmI(BaseModel):
    subject: str
    role: Role
    tenant: str | None
    pool: str | None = None
    instance_id: str | None = None
    tier: str | None = None
    identity_id: int
    token_id: int
