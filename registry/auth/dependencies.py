from __future__ import annotations

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from registry.auth import tokens
from registry.auth.principal import Principal, Role
from registry.db import transaction
from registry.errors import Forbidden

bearer = HTTPBearer(auto_error=False, description="An API token from `loraplane token create`.")


def any_token(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Principal:
    with transaction() as session:
        return tokens.authenticate(session, credentials.credentials if credentials else None)


def authenticated(principal: Principal = Depends(any_token)) -> Principal:
    """Every registry endpoint but /v1/whoami: app keys are for the router only."""
    if principal.role is Role.APP:
        raise Forbidden("app keys may only call the router (and /v1/whoami)",
                        hint="Call the router's OpenAI API with this key; use an uploader, "
                             "reviewer or admin token for the registry.")
    return principal
