from __future__ import annotations

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from registry.auth import tokens
from registry.auth.principal import Principal
from registry.db import transaction

bearer = HTTPBearer(auto_error=False, description="An API token from `loraplane token create`.")


def authenticated(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Principal:
    with transaction() as session:
        return tokens.authenticate(session, credentials.credentials if credentials else None)
