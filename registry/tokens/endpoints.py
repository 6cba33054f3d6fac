from __future__ import annotations

from fastapi import APIRouter, Depends, Path, Query
from sqlalchemy.orm import Session

from registry.auth.dependencies import any_token, authenticated
from registry.auth.principal import Principal
from registry.names import NAME_PATTERN
from registry.page_query import paging
from registry.pagination import PageRequest
from registry.request_session import RequestSession
from registry.tokens import service
from registry.tokens.schemas import TokenCreate, TokenCreated, TokenOut, TokenPage, WhoAmI

router = APIRouter(prefix="/v1", tags=["auth"])
TokenId = Path(ge=1, le=2**31 - 1)


@router.post("/tokens", status_code=201, response_model=TokenCreated)
def create_token(spec: TokenCreate, principal: Principal = Depends(authenticated),
                 session: Session = RequestSession):
    """Admins issue tokens in their tenant; a global admin also node, router and global ones."""
    return service.issue(session, principal, spec)


@router.get("/tokens", response_model=TokenPage)
def list_tokens(tenant: str | None = Query(None, max_length=64, pattern=NAME_PATTERN.pattern),
                include_revoked: bool = False, page: PageRequest = paging(default_limit=100),
                principal: Principal = Depends(authenticated), session: Session = RequestSession):
    """Tokens you may manage: a global admin's are all, a tenant admin's its tenant's, anyone
    else's their own. Secrets are never listed."""
    items, next_cursor = service.list_tokens(session, principal, tenant=tenant,
                                             include_revoked=include_revoked, limit=page.limit,
                                             cursor=page.cursor)
    return TokenPage(items=items, next_cursor=next_cursor)


@router.post("/tokens/{token_id}/revoke", response_model=TokenOut)
def revoke_token(token_id: int = TokenId, with_issued: bool = Query(False, description=(
                     "Also revoke every token this one issued, and theirs.")),
                 principal: Principal = Depends(authenticated), session: Session = RequestSession):
    """Revoke at once, everywhere (dashboard sessions included). Safe to repeat."""
    return service.revoke(session, principal, token_id, with_issued=with_issued)


@router.get("/whoami", response_model=WhoAmI)
def whoami(principal: Principal = Depends(any_token)):
    return WhoAmI(subject=principal.subject, role=principal.role, tenant=principal.tenant,
                  pool=principal.pool, instance_id=principal.instance_id, tier=principal.tier,
                  identity_id=principal.identity_id, token_id=principal.token_id)
