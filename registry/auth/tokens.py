"""API tokens: random secrets, stored only as an HMAC under a key of the registry host's
(keys.py), and the principal a presented token stands for. Issuing and revoking them is
registry.tokens' job.

Keyed, because whoever can write to the database must not be able to mint a token by inserting
the hash of a secret of their choosing. After LORAPLANE_SECRET_KEY is rotated, a token stored
under a previous secret's key is accepted, and its row rehashed under the current one. Tokens
issued before hashes were keyed are stored as plain sha256: with
LORAPLANE_LEGACY_TOKEN_HASHES=upgrade (an upgrade window), such a token is accepted once and its
row rehashed, keyed; by default it is refused."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from registry.auth import repository
from registry.auth.principal import Principal, Role
from registry.auth.service_accounts import pod_tokens
from registry.clock import aware
from registry.errors import Unauthorized
from registry.keys import Purpose, key_for, keyed
from registry.secret_checkpoints import service as secret_checkpoints
from registry.rows import existing
from registry.settings import get_settings
from registry.tables import ApiToken, Pool, Tenant

TOKEN_PREFIX = "lpt_"
PEOPLE = (Role.ADMIN.value, Role.REVIEWER.value, Role.UPLOADER.value)


def hash_token(token: str) -> str:
    # Tokens carry 256 random bits, so a fast keyed hash is safe and keeps auth cheap.
    return hmac.new(key_for(Purpose.API_TOKENS), token.encode(), hashlib.sha256).hexdigest()


def legacy_hash(token: str) -> str:
    """How tokens were stored before their hashes were keyed."""
    return hashlib.sha256(token.encode()).hexdigest()


def has_admin(session: Session) -> bool:
    return repository.global_admin_exists(session)


def authenticate(session: Session, plain: str | None, *, unlinked_ok: bool = False) -> Principal:
    """The token's principal. `unlinked_ok`: a person's token not linked to a sign-on passes even
    where people must sign on (LORAPLANE_SSO_REQUIRED_FOR_PEOPLE): linking it needs that."""
    if not plain:
        raise Unauthorized(
            "missing bearer token", hint="Send 'Authorization: Bearer <token>' (loraplane token create)."
        )
    if pod_tokens.presented(plain):  # a pod's service-account token: no row of ours
        return pod_tokens.principal(plain)
    row = repository.token_by_hash(session, hash_token(plain))
    if row is None:
        row = rehashed(session, plain, _older_hashes(plain))
    return _principal(session, row, unlinked_ok=unlinked_ok)


def _older_hashes(plain: str) -> list[tuple[str | None, str]]:
    """How the token may still be stored: (the previous secret's fingerprint, the hash under its
    key), or (in an upgrade window) (None, unkeyed)."""
    older: list[tuple[str | None, str]] = [
        (secret, hmac.new(key, plain.encode(), hashlib.sha256).hexdigest())
        for secret, key in keyed(Purpose.API_TOKENS)[1:]]
    if get_settings().legacy_token_hashes == "upgrade":
        older.append((None, legacy_hash(plain)))
    return older


def rehashed(session: Session, plain: str, older_hashes: list[tuple[str | None, str]]) -> ApiToken | None:
    """The token's row if it is stored under one of `older_hashes`, now stored under the current
    key. A previous secret's hash counts only for a token made before that secret's rotation
    (registry/secret_checkpoints/). (A read-only caller's change is simply not committed; the next
    use rehashes it.)"""
    for secret, older in older_hashes:
        row = repository.token_by_hash(session, older)
        if row is not None and (secret is None or secret_checkpoints.token_believed(session, row.id, secret)):
            row.token_hash = hash_token(plain)
            session.flush()
            return row
    return None


def principal_by_id(session: Session, token_id: int) -> Principal:
    """The token's principal, for a dashboard session that holds the token's id, not the token:
    a revoked token ends its sessions too."""
    return _principal(session, session.get(ApiToken, token_id))


def refusals_by_id(session: Session, token_ids: list[int]) -> dict[int, Unauthorized]:
    """Of these tokens, those no longer valid (revoked, expired, gone), with why: one query."""
    rows = repository.tokens_by_ids(session, token_ids)
    refused = {}
    for token_id in token_ids:
        try:
            _principal(session, rows.get(token_id))
        except Unauthorized as refusal:
            refused[token_id] = refusal
    return refused


def _principal(session: Session, row: ApiToken | None, *, unlinked_ok: bool = False) -> Principal:
    if row is None or row.revoked_at is not None:
        raise Unauthorized("invalid or revoked token", hint="Ask an admin for a new token.")
    if row.expires_at is not None and aware(row.expires_at) <= datetime.now(UTC):
        raise Unauthorized("this token has expired", code="token_expired",
                           hint="Ask an admin for a new token (loraplane token create).")
    tenant_row = existing(session, Tenant, row.tenant_id) if row.tenant_id else None
    if tenant_row is not None and tenant_row.disabled_at is not None:
        # Checked at every use, as revocation is: the dashboard's sessions and the long-polls'
        # rechecks come through here too. The tokens are kept: enabling the tenant restores them.
        raise Unauthorized(f"tenant {tenant_row.name!r} is disabled", code="tenant_disabled",
                           hint="A global admin enables it again (loraplane tenant enable "
                                f"{tenant_row.name}); its tokens then work again.")
    if tenant_row is not None and row.origin == "issued" and row.role in PEOPLE and not unlinked_ok \
            and get_settings().sso_required_for_people and not repository.signed_on(session, row.identity_id):
        raise Unauthorized("people sign on here, and this token's identity is not linked to a sign-on",
                           code="sign_on_required",
                           hint="Sign on (loraplane login, or the dashboard), then link this token to "
                                "it (loraplane link-identity); or use the sign-on alone.")
    tenant = tenant_row.name if tenant_row else None
    pool = existing(session, Pool, row.pool_id).name if row.pool_id else None
    return Principal(token_id=row.id, subject=row.subject, role=Role(row.role), tenant=tenant,
                     pool=pool, tier=row.tier, identity_id=row.identity_id,
                     instance_id=row.instance_id)
