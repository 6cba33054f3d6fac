"""API tokens: random secrets, stored only as their sha256, and the principal a presented token
stands for. Issuing and revoking them is registry.tokens' job."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from registry.auth import repository
from registry.auth.principal import Principal, Role
from registry.clock import aware
from registry.errors import Unauthorized
from registry.tables import ApiToken, Pool, Tenant

TOKEN_PREFIX = "lpt_"


def hash_token(token: str) -> str:
    # Tokens carry 256 random bits, so a fast hash is safe and keeps auth cheap.
    return hashlib.sha256(token.encode()).hexdigest()


def has_admin(session: Session) -> bool:
    return repository.global_admin_exists(session)


def authenticate(session: Session, plain: str | None) -> Principal:
    if not plain:
        raise Unauthorized(
            "missing bearer token", hint="Send 'Authorization: Bearer <token>' (loraplane token create)."
        )
    return _principal(session, repository.token_by_hash(session, hash_token(plain)))


def principal_by_id(session: Session, token_id: int) -> Principal:
    """The token's principal, for a dashboard session that holds the token's id, not the token:
    a revoked token ends its sessions too."""
    return _principal(session, session.get(ApiToken, token_id))


def _principal(session: Session, row: ApiToken | None) -> Principal:
    if row is None or row.revoked_at is not None:
        raise Unauthorized("invalid or revoked token", hint="Ask an admin for a new token.")
    if row.expires_at is not None and aware(row.expires_at) <= datetime.now(UTC):
        raise Unauthorized("this token has expired", code="token_expired",
                           hint="Ask an admin for a new token (loraplane token create).")
    tenant = session.get(Tenant, row.tenant_id).name if row.tenant_id else None
    pool = session.get(Pool, row.pool_id).name if row.pool_id else None
    return Principal(token_id=row.id, subject=row.subject, role=Role(row.role), tenant=tenant,
                     pool=pool, tier=row.tier, identity_id=row.identity_id,
                     instance_id=row.instance_id)
