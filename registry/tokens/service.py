"""Token administration over the API: who may issue, list and revoke which tokens."""

from __future__ import annotations

from sqlalchemy.orm import Session

from registry.auth import repository
from registry.auth.principal import Principal, Role
from registry.errors import Forbidden, NotFound
from registry.rows import existing
from registry.tables import ApiToken, Identity, Pool, Tenant
from registry.tokens import issuing as tokens
from registry.tokens.schemas import TokenCreate, TokenCreated, TokenOut


def issue(session: Session, principal: Principal, spec: TokenCreate) -> TokenCreated:
    principal.require({Role.ADMIN}, spec.tenant)
    if spec.tenant is None and not principal.is_global_admin:
        raise Forbidden("only a global admin may create tokens without a tenant",
                        hint="Pass the tenant this token is for.")
    row, plain = tokens.create_token(
        session, subject=spec.subject, role=spec.role, tenant=spec.tenant, pool=spec.pool,
        tier=spec.tier, instance_id=spec.instance_id, identity_id=spec.identity_id,
        ttl_days=spec.ttl_days, issued_by=principal, actor=principal.label,
        vllm_url=str(spec.vllm_url) if spec.vllm_url else None)
    return TokenCreated(**to_out(session, row).model_dump(), token=plain)


def list_tokens(session: Session, principal: Principal, *, tenant: str | None,
                include_revoked: bool, limit: int, cursor: str | None) -> tuple[list[TokenOut], str | None]:
    """A global admin sees every token; a tenant admin its tenant's; anyone else their own."""
    tenant, identity_id = _visible_to(principal, tenant)
    rows, next_cursor = repository.page_of_tokens(
        session, tenant=tenant, identity_id=identity_id, include_revoked=include_revoked,
        limit=limit, cursor=cursor)
    return [to_out(session, row) for row in rows], next_cursor


def _visible_to(principal: Principal, tenant: str | None) -> tuple[str | None, int | None]:
    """(tenant, identity) whose tokens the caller may list; None on both sides means every token."""
    if principal.is_global_admin:
        return tenant, None
    if principal.role is Role.ADMIN:
        principal.require({Role.ADMIN}, tenant or principal.tenant)
        return principal.tenant, None
    return None, principal.identity_id


def revoke(session: Session, principal: Principal, token_id: int, *, with_issued: bool = False) -> TokenOut:
    """Admins revoke their scope's tokens; anyone may revoke their own. Others' tokens are not
    found, so ids reveal nothing."""
    row = session.get(ApiToken, token_id)
    if row is None or not _may_manage(session, principal, row):
        raise NotFound(f"token {token_id} does not exist", code="token_not_found",
                       hint="List the tokens you may manage with GET /v1/tokens.")
    return to_out(session, tokens.revoke_token(session, token_id, actor=principal.label,
                                               with_issued=with_issued))


def _may_manage(session: Session, principal: Principal, row: ApiToken) -> bool:
    if principal.is_global_admin or row.identity_id == principal.identity_id:
        return True
    if principal.role is not Role.ADMIN or row.tenant_id is None:
        return False
    return existing(session, Tenant, row.tenant_id).name == principal.tenant


def to_out(session: Session, row: ApiToken) -> TokenOut:
    identity = existing(session, Identity, row.identity_id)
    return TokenOut(
        id=row.id, subject=row.subject, role=Role(row.role),
        tenant=existing(session, Tenant, row.tenant_id).name if row.tenant_id else None,
        pool=existing(session, Pool, row.pool_id).name if row.pool_id else None,
        instance_id=row.instance_id, tier=row.tier, identity_id=row.identity_id,
        identity_name=identity.name, issued_by_token_id=row.created_by_token_id,
        created_at=row.created_at, expires_at=row.expires_at, revoked_at=row.revoked_at)
