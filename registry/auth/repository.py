"""The queries of tenants, identities, their API tokens and the dashboard sessions signed in with
them."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, aliased

from registry.auth.principal import Role
from registry.pagination import fetch_page
from registry.tables import ApiToken, DashboardSession, Identity, SsoIdentity, Tenant


def find_tenant(session: Session, name: str) -> Tenant | None:
    return session.scalar(select(Tenant).where(Tenant.name == name))


def lock_tenant(session: Session, name: str) -> Tenant | None:
    """The tenant's row under FOR UPDATE, so concurrent changes to its settings see each other."""
    return session.scalar(select(Tenant).where(Tenant.name == name).with_for_update())


def token_by_hash(session: Session, token_hash: str) -> ApiToken | None:
    return session.scalar(select(ApiToken).where(ApiToken.token_hash == token_hash))


def tokens_by_ids(session: Session, token_ids: list[int]) -> dict[int, ApiToken]:
    return {row.id: row for row in session.scalars(select(ApiToken).where(ApiToken.id.in_(token_ids)))}


def tokens_issued_by(session: Session, token_id: int) -> list[ApiToken]:
    return list(session.scalars(select(ApiToken).where(ApiToken.created_by_token_id == token_id)))


def global_admin_exists(session: Session) -> bool:
    """Whether any unrevoked global admin token exists (expired ones count)."""
    query = select(ApiToken.id).where(
        ApiToken.role == Role.ADMIN.value, ApiToken.tenant_id.is_(None), ApiToken.revoked_at.is_(None)
    )
    return session.scalar(query.limit(1)) is not None


def page_of_tokens(session: Session, *, tenant: str | None, identity_id: int | None,
                   include_revoked: bool, limit: int,
                   cursor: str | None) -> tuple[list[ApiToken], str | None]:
    """Tokens of one tenant, or of one identity, or all of them when both are None."""
    return fetch_page(session, _tokens(tenant, identity_id, include_revoked), ApiToken.id,
                      limit=limit, cursor=cursor)


def all_tokens(session: Session, *, tenant: str | None, include_revoked: bool) -> list[ApiToken]:
    """Every token (or a tenant's) in id order, for an operator on the registry host."""
    return list(session.scalars(_tokens(tenant, None, include_revoked).order_by(ApiToken.id)))


def _tokens(tenant: str | None, identity_id: int | None, include_revoked: bool):
    query = select(ApiToken)
    if tenant is not None:
        query = query.join(Tenant, Tenant.id == ApiToken.tenant_id).where(Tenant.name == tenant)
    if identity_id is not None:
        query = query.where(ApiToken.identity_id == identity_id)
    if not include_revoked:
        query = query.where(ApiToken.revoked_at.is_(None))
    return query


def issuers_of(session: Session, identity_ids: set[int]) -> set[int]:
    """The identities that issued a token held by any of `identity_ids`: one step of a lineage."""
    issuer_token = aliased(ApiToken)
    return set(session.scalars(
        select(issuer_token.identity_id)
        .join_from(ApiToken, issuer_token, ApiToken.created_by_token_id == issuer_token.id)
        .where(ApiToken.identity_id.in_(identity_ids))))


def global_admin_identities(session: Session, identity_ids: set[int]) -> set[int]:
    return set(session.scalars(select(ApiToken.identity_id).where(
        ApiToken.identity_id.in_(identity_ids), ApiToken.role == Role.ADMIN.value,
        ApiToken.tenant_id.is_(None))))


def dashboard_session(session: Session, secret_hash: str) -> DashboardSession | None:
    return session.scalar(select(DashboardSession).where(
        DashboardSession.secret_hash == secret_hash))


def lock_dashboard_session(session: Session, secret_hash: str) -> DashboardSession | None:
    return session.scalar(select(DashboardSession).where(
        DashboardSession.secret_hash == secret_hash).with_for_update())


def linked_identities(session: Session, identity_id: int) -> set[int]:
    """The identity and every identity linked with it as the same person: links always point at
    one root (registry/sso/linking.py), so one step finds them all."""
    root = session.scalar(select(Identity.same_as_id).where(Identity.id == identity_id)) or identity_id
    return {root, *session.scalars(select(Identity.id).where(Identity.same_as_id == root))}


def signed_on(session: Session, identity_id: int) -> bool:
    """Whether the person behind `identity_id` has a sign-on (an identity of the provider's)."""
    return session.scalar(select(SsoIdentity.id).where(
        SsoIdentity.identity_id.in_(linked_identities(session, identity_id))).limit(1)) is not None
