"""API tokens: random secrets shown once, stored only as their sha256."""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from registry import audit
from registry.auth.principal import POOL_ROLES, TIERS, Principal, Role
from registry.errors import NotFound, Unauthorized, Unprocessable
from registry.names import check_name
from registry.tables import ApiToken, Pool, Tenant

TOKEN_PREFIX = "lpt_"


def hash_token(token: str) -> str:
    # Tokens carry 256 random bits, so a fast hash is safe and keeps auth cheap.
    return hashlib.sha256(token.encode()).hexdigest()


def ensure_tenant(session: Session, name: str) -> Tenant:
    check_name(name, "tenant")
    tenant = session.scalar(select(Tenant).where(Tenant.name == name))
    if tenant is None:
        tenant = Tenant(name=name)
        session.add(tenant)
        session.flush()
    return tenant


def create_token(
    session: Session, *, subject: str, role: Role, tenant: str | None, actor: str,
    pool: str | None = None, tier: str | None = None,
) -> tuple[ApiToken, str]:
    """Return the stored row and the plain token, which is never stored or shown again.
    Node and router tokens belong to one pool and no tenant: a pool serves every tenant's
    adapters. App keys belong to one tenant and carry an SLO tier."""
    if not subject.strip() or len(subject) > 128:
        raise Unprocessable("subject must be 1-128 characters", hint="Name the person or service.")
    pool_row = _node_pool(session, role, tenant, pool)
    if tenant is None and role not in (Role.ADMIN, *POOL_ROLES):
        raise Unprocessable(f"a '{role}' token needs a tenant", hint="Pass --tenant NAME.")
    tier = _tier(role, tier)
    tenant_row = ensure_tenant(session, tenant) if tenant is not None else None
    plain = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken(
        token_hash=hash_token(plain),
        subject=subject.strip(),
        role=role.value,
        tenant_id=tenant_row.id if tenant_row else None,
        pool_id=pool_row.id if pool_row else None,
        tier=tier,
    )
    session.add(row)
    session.flush()
    audit.record(
        session,
        actor=actor,
        action="token.create",
        subject=f"token/{row.id}",
        tenant_id=row.tenant_id,
        after={"subject": row.subject, "role": row.role, "tenant": tenant, "pool": pool, "tier": tier},
    )
    return row, plain


def _tier(role: Role, tier: str | None) -> str | None:
    if role is not Role.APP:
        if tier is not None:
            raise Unprocessable("only app keys have an SLO tier", code="invalid_token_scope",
                                hint="Drop --tier, or use --role app.")
        return None
    if tier not in (None, *TIERS):
        raise Unprocessable(f"unknown tier {tier!r}", code="invalid_token_scope",
                            hint="Use interactive or batch.")
    return tier or TIERS[0]


def _node_pool(session: Session, role: Role, tenant: str | None, pool: str | None) -> Pool | None:
    if role not in POOL_ROLES:
        if pool is not None:
            raise Unprocessable("only node and router tokens belong to a pool",
                                code="invalid_token_scope", hint="Drop --pool, or use --role node.")
        return None
    if pool is None or tenant is not None:
        raise Unprocessable(f"a {role} token needs a pool and no tenant", code="invalid_token_scope",
                            hint=f"Pass --role {role} --pool POOL: a pool serves every tenant's "
                                 "adapters.")
    row = session.scalar(select(Pool).where(Pool.name == pool))
    if row is None:
        raise NotFound(f"pool {pool!r} does not exist", code="pool_not_found",
                       hint="Create the pool first (loraplane pool create).")
    return row


def revoke_token(session: Session, token_id: int, *, actor: str) -> None:
    row = session.get(ApiToken, token_id)
    if row is None:
        raise NotFound(f"token {token_id} does not exist")
    if row.revoked_at is None:
        row.revoked_at = datetime.now(UTC)
        audit.record(
            session, actor=actor, action="token.revoke", subject=f"token/{row.id}",
            tenant_id=row.tenant_id, before={"revoked": False}, after={"revoked": True},
        )
        from registry.active_set.changes import announce  # other processes drop cached tokens

        announce(session, {"kind": "token_revoked"})


def has_admin(session: Session) -> bool:
    query = select(ApiToken.id).where(
        ApiToken.role == Role.ADMIN.value, ApiToken.tenant_id.is_(None), ApiToken.revoked_at.is_(None)
    )
    return session.scalar(query.limit(1)) is not None


def authenticate(session: Session, plain: str | None) -> Principal:
    if not plain:
        raise Unauthorized(
            "missing bearer token", hint="Send 'Authorization: Bearer <token>' (loraplane token create)."
        )
    return _principal(session, session.scalar(select(ApiToken).where(ApiToken.token_hash == hash_token(plain))))


def principal_by_id(session: Session, token_id: int) -> Principal:
    """The token's principal, for a dashboard session that holds the token's id, not the token:
    a revoked token ends its sessions too."""
    return _principal(session, session.get(ApiToken, token_id))


def _principal(session: Session, row: ApiToken | None) -> Principal:
    if row is None or row.revoked_at is not None:
        raise Unauthorized("invalid or revoked token", hint="Ask an admin for a new token.")
    tenant = session.get(Tenant, row.tenant_id).name if row.tenant_id else None
    pool = session.get(Pool, row.pool_id).name if row.pool_id else None
    return Principal(token_id=row.id, subject=row.subject, role=Role(row.role), tenant=tenant,
                     pool=pool, tier=row.tier)
