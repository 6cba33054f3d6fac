"""A tenant's upload-signing keys and whether its uploads must be signed. Only the tenant's
admins and global admins read or change them; every change is audited."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from registry import audit
from registry.auth import repository as tenants
from registry.auth.principal import Principal, Role
from registry.errors import Conflict, NotFound, Unprocessable
from registry.names import check_name
from registry.signing_keys import public_keys, repository
from registry.signing_keys.schemas import (
    SigningKeyCreate, SigningKeyOut, SigningPolicyOut, SigningPolicyUpdate,
)
from registry.tables import Tenant, TenantSigningKey

# Each upload with a signature looks its key up among these; a bound keeps that cheap.
MAX_ACTIVE_KEYS = 32
ADD_KEY_HINT = "A tenant admin adds one: loraplane signing-key add TENANT NAME --public-key key.pub."


@dataclass(frozen=True)
class TrustedKey:
    name: str
    fingerprint: str
    pem: str


@dataclass(frozen=True)
class UploadPolicy:
    """What an upload of the tenant is checked against, read in the upload's first transaction."""

    required: bool
    keys: tuple[TrustedKey, ...]


def upload_policy(session: Session, tenant: Tenant) -> UploadPolicy:
    keys = tuple(TrustedKey(row.name, row.fingerprint, row.public_key_pem)
                 for row in repository.active_keys(session, tenant.id))
    return UploadPolicy(required=tenant.require_signed_uploads, keys=keys)


def add(session: Session, principal: Principal, tenant: str, spec: SigningKeyCreate) -> SigningKeyOut:
    row = _tenant_for(session, principal, tenant, lock=True)
    key = public_keys.parse(spec.public_key_pem)
    if repository.by_name(session, row.id, spec.name) is not None:
        raise Conflict(f"tenant {tenant!r} already has a signing key named {spec.name!r}",
                       code="already_exists", hint="Names are never reused, revoked keys included: "
                                                   "pick another name.")
    active = repository.active_keys(session, row.id)
    same = next((k for k in active if k.fingerprint == key.fingerprint), None)
    if same is not None:
        raise Conflict(f"this key is already signing key {same.name!r} of tenant {tenant!r}",
                       code="already_exists", hint="Each key is added once.")
    if len(active) >= MAX_ACTIVE_KEYS:
        raise Conflict(f"tenant {tenant!r} has {MAX_ACTIVE_KEYS} active signing keys, the most it "
                       "may have", code="too_many_signing_keys", hint="Revoke keys no longer in use.")
    signing_key = TenantSigningKey(tenant_id=row.id, name=spec.name, public_key_pem=key.pem,
                                   fingerprint=key.fingerprint, created_by=principal.label)
    session.add(signing_key)
    session.flush()
    audit.record(session, actor=principal.label, action="signing_key.add",
                 subject=_subject(tenant, spec.name), tenant_id=row.id,
                 after={"fingerprint": key.fingerprint})
    return _out(tenant, signing_key)


def list_keys(session: Session, principal: Principal, tenant: str, *,
              include_revoked: bool) -> list[SigningKeyOut]:
    row = _tenant_for(session, principal, tenant)
    rows = (repository.all_keys if include_revoked else repository.active_keys)(session, row.id)
    return [_out(tenant, key) for key in rows]


def revoke(session: Session, principal: Principal, tenant: str, name: str) -> SigningKeyOut:
    """Uploads signed by the key are refused from now on. Safe to repeat."""
    row = _tenant_for(session, principal, tenant, lock=True)
    key = repository.by_name(session, row.id, check_name(name, "signing key"))
    if key is None:
        raise NotFound(f"tenant {tenant!r} has no signing key named {name!r}",
                       code="signing_key_not_found",
                       hint=f"List them with GET /v1/tenants/{tenant}/signing-keys"
                            "?include_revoked=true.")
    if key.revoked_at is None:
        key.revoked_at = datetime.now(UTC)
        audit.record(session, actor=principal.label, action="signing_key.revoke",
                     subject=_subject(tenant, name), tenant_id=row.id,
                     before={"fingerprint": key.fingerprint, "revoked_at": None},
                     after={"fingerprint": key.fingerprint, "revoked_at": key.revoked_at.isoformat()})
    return _out(tenant, key)


def policy(session: Session, principal: Principal, tenant: str) -> SigningPolicyOut:
    row = _tenant_for(session, principal, tenant)
    return _policy_out(session, tenant, row)


def set_policy(session: Session, principal: Principal, tenant: str,
               spec: SigningPolicyUpdate) -> SigningPolicyOut:
    row = _tenant_for(session, principal, tenant, lock=True)
    if spec.require_signed_uploads and repository.count_active(session, row.id) == 0:
        raise Unprocessable(f"tenant {tenant!r} has no signing keys, so requiring signed uploads "
                            "would refuse every upload", code="no_signing_keys", hint=ADD_KEY_HINT)
    before = row.require_signed_uploads
    if before != spec.require_signed_uploads:
        row.require_signed_uploads = spec.require_signed_uploads
        audit.record(session, actor=principal.label, action="tenant.signing_policy",
                     subject=f"tenant/{tenant}", tenant_id=row.id,
                     before={"require_signed_uploads": before},
                     after={"require_signed_uploads": spec.require_signed_uploads})
    return _policy_out(session, tenant, row)


def _tenant_for(session: Session, principal: Principal, tenant: str, *, lock: bool = False) -> Tenant:
    """The tenant, once the caller is known to be its admin (before anything says it exists).
    Changes lock its row, so concurrent ones see each other's keys."""
    principal.require({Role.ADMIN}, check_name(tenant, "tenant"))
    row = tenants.lock_tenant(session, tenant) if lock else tenants.find_tenant(session, tenant)
    if row is None:
        raise NotFound(f"tenant {tenant!r} does not exist", code="tenant_not_found",
                       hint="A global admin creates it: loraplane tenant create NAME.")
    return row


def _policy_out(session: Session, tenant: str, row: Tenant) -> SigningPolicyOut:
    return SigningPolicyOut(tenant=tenant, require_signed_uploads=row.require_signed_uploads,
                            active_keys=repository.count_active(session, row.id))


def _subject(tenant: str, name: str) -> str:
    return f"{tenant}/signing-keys/{name}"


def _out(tenant: str, row: TenantSigningKey) -> SigningKeyOut:
    return SigningKeyOut(tenant=tenant, name=row.name, fingerprint=row.fingerprint,
                         public_key_pem=row.public_key_pem, created_by=row.created_by,
                         created_at=row.created_at, revoked_at=row.revoked_at)
