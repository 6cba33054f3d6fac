"""Issuing and revoking API tokens: random secrets shown once. Each belongs to an identity,
records the token that issued it, and expires."""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from registry import audit
from registry.active_set.writing import announcements
from registry.auth import repository
from registry.auth.principal import POOL_ROLES, TIERS, Principal, Role
from registry.auth.tokens import TOKEN_PREFIX, hash_token
from registry.clock import aware
from registry.errors import Conflict, Forbidden, NotFound, Unprocessable
from registry.names import check_name
from registry.nodes import addresses
from registry.pool_lookup import pool_by_name
from registry.settings import get_settings
from registry.tables import ApiToken, Identity, Pool, Tenant
from registry.tenants import service as tenants
from registry.tokens.schemas import SUBJECT_PATTERN


def ensure_tenant(session: Session, name: str, *, actor: str = "operator") -> Tenant:
    """The tenant, made (and audited as tenant.created) when this is its first token."""
    check_name(name, "tenant")
    tenant = repository.find_tenant(session, name)
    if tenant is None:
        tenant = tenants.create_for_token(session, name, actor=actor)
    return tenant


def create_token(
    session: Session, *, subject: str, role: Role, tenant: str | None, actor: str,
    pool: str | None = None, tier: str | None = None, instance_id: str | None = None,
    issued_by: Principal | None = None, identity_id: int | None = None,
    ttl_days: int | None = None, vllm_url: str | None = None,
) -> tuple[ApiToken, str]:
    """Return the stored row and the plain token, which is never stored or shown again.
    Node and router tokens belong to one pool, one node or router id and no tenant: a pool
    serves every tenant's adapters. App keys belong to one tenant and carry an SLO tier.
    `identity_id` issues another token to an existing identity; otherwise a new identity is
    made. `issued_by` is the calling token, None for an operator on the database. A node token
    binds its node's vLLM address (`vllm_url`), or keeps the one bound before: routers send
    prompts only there, whatever the node reports."""
    if not re.fullmatch(SUBJECT_PATTERN, subject.strip()):
        raise Unprocessable("subject must be 1-128 letters, digits, spaces or . _ @ ' + -",
                            code="invalid_subject", hint="Name the person or service plainly.")
    pool_row = _node_pool(session, role, tenant, pool)
    instance_id = _instance(role, instance_id)
    _bind_address(session, role, pool_row, instance_id, vllm_url, actor)
    if role is Role.METRICS and tenant is not None:
        raise Unprocessable("a metrics token has no tenant: metrics cover every tenant and pool",
                            code="invalid_token_scope", hint="Drop --tenant; a global admin issues it.")
    if tenant is None and role not in (Role.ADMIN, Role.METRICS, *POOL_ROLES):
        raise Unprocessable(f"a '{role}' token needs a tenant", hint="Pass --tenant NAME.")
    tier = _tier(role, tier)
    tenant_row = ensure_tenant(session, tenant, actor=actor) if tenant is not None else None
    if tenant_row is not None and tenant_row.disabled_at is not None:
        raise Conflict(f"tenant {tenant!r} is disabled, so no token is issued for it",
                       code="tenant_disabled",
                       hint=f"A global admin enables it first (loraplane tenant enable {tenant}).")
    identity = _identity(session, identity_id, subject.strip(), tenant_row, issued_by)
    plain = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken(
        token_hash=hash_token(plain),
        subject=subject.strip(),
        identity_id=identity.id,
        created_by_token_id=issued_by.token_id if issued_by else None,
        role=role.value,
        tenant_id=tenant_row.id if tenant_row else None,
        pool_id=pool_row.id if pool_row else None,
        instance_id=instance_id,
        tier=tier,
        expires_at=_expiry(session, ttl_days, issued_by),
    )
    session.add(row)
    session.flush()
    audit.record(
        session,
        actor=actor,
        action="token.create",
        subject=f"token/{row.id}",
        tenant_id=row.tenant_id,
        after={"subject": row.subject, "identity": identity.id, "role": row.role, "tenant": tenant,
               "pool": pool, "instance_id": instance_id, "tier": tier,
               "issued_by_token": row.created_by_token_id, "expires_at": row.expires_at},
    )
    return row, plain


def _identity(session: Session, identity_id: int | None, name: str, tenant: Tenant | None,
              issued_by: Principal | None) -> Identity:
    if identity_id is None:
        identity = Identity(name=name, tenant_id=tenant.id if tenant else None)
        session.add(identity)
        session.flush()
        return identity
    # Only for oneself (a second device), or by the root of trust: a token on someone else's
    # identity would act, and be audited, as that person.
    if issued_by is not None and not issued_by.is_global_admin and issued_by.identity_id != identity_id:
        raise Forbidden("only a global admin may issue a token to another identity",
                        code="forbidden",
                        hint="Omit identity_id to make a new identity, or ask that person to issue "
                             "their own second token.")
    known = session.get(Identity, identity_id)
    if known is None or known.tenant_id != (tenant.id if tenant else None):
        raise NotFound(f"identity {identity_id} does not exist in this token's tenant",
                       code="identity_not_found",
                       hint="Give an identity of the same tenant (GET /v1/tokens lists them), or "
                            "omit it to make a new identity.")
    return known


def _expiry(session: Session, ttl_days: int | None, issued_by: Principal | None) -> datetime:
    """Never later than the issuer's own expiry: a stolen short-lived token cannot mint itself
    lasting access."""
    expires = datetime.now(UTC) + timedelta(days=_ttl_days(ttl_days))
    issuer = session.get(ApiToken, issued_by.token_id) if issued_by else None
    if issuer is not None and issuer.expires_at is not None:
        expires = min(expires, aware(issuer.expires_at))
    return expires


def _ttl_days(ttl_days: int | None) -> int:
    settings = get_settings()
    if ttl_days is None:
        return min(settings.token_ttl_days, settings.token_max_ttl_days)
    if not 1 <= ttl_days <= settings.token_max_ttl_days:
        raise Unprocessable(f"a token lives 1 to {settings.token_max_ttl_days} days, not {ttl_days}",
                            code="invalid_token_ttl",
                            hint="Pick a shorter lifetime and issue a new token before it ends.")
    return ttl_days


def _instance(role: Role, instance_id: str | None) -> str | None:
    if role not in POOL_ROLES:
        if instance_id is not None:
            raise Unprocessable("only node and router tokens are bound to an instance id",
                                code="invalid_token_scope", hint="Drop --instance-id.")
        return None
    if instance_id is None:
        raise Unprocessable(f"a {role} token needs the {role} id it speaks for",
                            code="invalid_token_scope",
                            hint=f"Pass --instance-id with the {role}'s id: one token per {role}, "
                                 f"so a leaked token cannot pose as another {role}.")
    check_name(instance_id, role.value)
    return instance_id


def _bind_address(session: Session, role: Role, pool: Pool | None, node_id: str | None,
                  vllm_url: str | None, actor: str) -> None:
    if role is not Role.NODE:
        if vllm_url is not None:
            raise Unprocessable("only node tokens are bound to a vLLM address",
                                code="invalid_token_scope", hint="Drop --vllm-url, or use --role node.")
        return
    if pool is None or node_id is None:  # _node_pool and _instance refused a node token without them
        raise Unprocessable("a node token needs a pool and a node id", code="invalid_token_scope",
                            hint="Pass --role node --pool POOL --instance-id NODE_ID.")
    if vllm_url is not None:
        addresses.bind(session, pool, node_id, vllm_url, actor=actor)
    elif not addresses.is_bound(session, pool, node_id):
        raise Unprocessable(f"node {node_id!r} of pool {pool.name!r} has no vLLM address bound",
                            code="node_address_required",
                            hint="Pass --vllm-url with the address routers reach this node's vLLM "
                                 "at: routers send prompts only to the address bound here, never "
                                 "to one a node reports.")


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
    return pool_by_name(session, pool)


def revoke_token(session: Session, token_id: int, *, actor: str, with_issued: bool = False) -> ApiToken:
    """Revoke a token; `with_issued` also every token it issued, and theirs (a departed admin's
    whole lineage). Safe to repeat."""
    row = session.get(ApiToken, token_id)
    if row is None:
        raise NotFound(f"token {token_id} does not exist", code="token_not_found")
    if with_issued:
        for issued in repository.tokens_issued_by(session, row.id):
            revoke_token(session, issued.id, actor=actor, with_issued=True)
    if row.revoked_at is None:
        row.revoked_at = datetime.now(UTC)
        audit.record(
            session, actor=actor, action="token.revoke", subject=f"token/{row.id}",
            tenant_id=row.tenant_id, before={"revoked": False}, after={"revoked": True},
        )
        announcements.token_revoked(session)  # every process drops the tokens it cached
    return row


