"""Token administration straight against the registry's database, for operators."""

from __future__ import annotations

from registry.auth.principal import Role
from registry.db import plain_transaction
from registry.unit_of_work import transaction
from registry.errors import Unprocessable
from registry.tokens import issuing as tokens

OPERATOR = "operator (cli)"


def create_token(*, subject: str, role: str, tenant: str | None, pool: str | None = None,
                 tier: str | None = None, instance_id: str | None = None,
                 identity_id: int | None = None, ttl_days: int | None = None,
                 vllm_url: str | None = None) -> str:
    try:
        parsed = Role(role)
    except ValueError:
        raise Unprocessable(f"unknown role {role!r}",
                            hint=f"Use one of: {', '.join(Role)}.") from None
    with transaction() as session:
        _, plain = tokens.create_token(session, subject=subject, role=parsed, tenant=tenant,
                                       pool=pool, tier=tier, instance_id=instance_id,
                                       identity_id=identity_id, ttl_days=ttl_days, actor=OPERATOR,
                                       vllm_url=vllm_url)
    return plain


def list_tokens(*, tenant: str | None, include_revoked: bool) -> list[dict]:
    """Every token (or a tenant's), as the API's global admin sees them: secrets are never shown."""
    from registry.auth import repository
    from registry.tokens.service import to_out

    with plain_transaction() as session:
        rows = repository.all_tokens(session, tenant=tenant, include_revoked=include_revoked)
        return [to_out(session, row).model_dump(mode="json") for row in rows]


def revoke_token(token_id: int, *, with_issued: bool = False) -> None:
    with transaction() as session:
        tokens.revoke_token(session, token_id, actor=OPERATOR, with_issued=with_issued)

