"""Token administration straight against the registry's database, for operators."""

from __future__ import annotations

from registry.auth import tokens
from registry.auth.principal import Role
from registry.db import transaction
from registry.errors import Unprocessable

OPERATOR = "operator (cli)"


def create_token(*, subject: str, role: str, tenant: str | None, pool: str | None = None,
                 tier: str | None = None) -> str:
    try:
        parsed = Role(role)
    except ValueError:
        raise Unprocessable(f"unknown role {role!r}",
                            hint=f"Use one of: {', '.join(Role)}.") from None
    with transaction() as session:
        _, plain = tokens.create_token(session, subject=subject, role=parsed, tenant=tenant,
                                       pool=pool, tier=tier, actor=OPERATOR)
    return plain


def revoke_token(token_id: int) -> None:
    with transaction() as session:
        tokens.revoke_token(session, token_id, actor=OPERATOR)


def bootstrap_admin() -> str | None:
    """Create the first global admin token, unless an admin already exists. Safe to rerun."""
    with transaction() as session:
        if tokens.has_admin(session):
            return None
        _, plain = tokens.create_token(session, subject="bootstrap-admin", role=Role.ADMIN,
                                       tenant=None, actor=OPERATOR)
    return plain
