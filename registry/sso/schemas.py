from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field


class SsoOut(BaseModel):
    enabled: bool
    provider: str | None = Field(description="What the sign-in button calls the identity provider.")
    start_path: str | None = Field(description="Where a browser starts a sign-on (the CLI adds its "
                                               "loopback port and PKCE challenge).")


class ExchangeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    exchange_code: str = Field(min_length=20, max_length=128, pattern=r"^[A-Za-z0-9_-]+$")
    code_verifier: str = Field(min_length=43, max_length=128, pattern=r"^[A-Za-z0-9._~-]+$")


class LoginOut(BaseModel):
    token: str = Field(description="A loraplane token of your identity; shown once.")
    expires_at: datetime
    subject: str
    role: str
    tenant: str | None
    identity_id: int


class LinkIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    token: str = Field(min_length=1, max_length=512, description=(
        "Another token of yours (an old one, say): holding it proves both identities are you."))


class LinkOut(BaseModel):
    identities: list[int] = Field(description="Every identity now linked as you.")
