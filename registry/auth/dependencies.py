from __future__ import annotations

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from registry.auth import tokens
from registry.auth.principal import Principal, Role
from registry.errors import Forbidden
from registry.request_session import RequestSession

bearer = HTTPBearer(auto_error=False, description="An API token from `loraplane token create`.")


def any_token(credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
              session: Session = RequestSession) -> Principal:
    """The token is read in the request's own session, the one its route then works in."""
    return tokens.authenticate(session, credentials.credentials if credentials else None)


def authenticated(principal: Principal = Depends(any_token)) -> Principal:
    """Every registry endpoint but /v1/whoami and /metrics: app keys are for the router only,
    metrics tokens for scraping only."""
    if principal.role is Role.METRICS:
        raise Forbidden("metrics tokens may only read /metrics (and /v1/whoami)",
                        hint="Use an uploader, reviewer or admin token for the registry's API.")
    if principal.role is Role.APP:
        raise Forbidden("app keys may only call the router (and /v1/whoami)",
                        hint="Call the router's OpenAI API with this key; use an uploader, "
                             "reviewer or admin token for the registry.")
    return principal


def metrics_reader(principal: Principal = Depends(any_token)) -> Principal:
    """A metrics token (loraplane token create --role metrics), or a global admin: metrics name
    every tenant and pool, so no tenant's token reads them."""
    if principal.role is not Role.METRICS:
        principal.require_global_admin()
    return principal
