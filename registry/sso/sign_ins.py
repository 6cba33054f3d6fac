"""A sign-on, from the redirect to the provider to a loraplane token.

`begin` makes a sign-in: a random state (only its hash is stored, each used once), a nonce and a
PKCE verifier, which stay in a cookie signed for this purpose alone (keys.py) on the browser that
started it, so a provider's answer is accepted only in that browser. `consume` takes the answer's
state once and for all, before anything slow, so a replayed answer is refused even if the first
one failed later. `sign_on` exchanges the code with the provider (Authlib), checks the ID token
(id_tokens.py), maps the claims to a role (grants.py) and finds the person's identity by issuer
and subject (identities.py). A dashboard sign-in then gets a token nobody sees, held by its
session; a CLI's is kept for the CLI to `exchange`, once, with its own PKCE verifier, for a
short-lived token."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from authlib.integrations.base_client.errors import OAuthError
from authlib.integrations.httpx_client import OAuth2Client
from itsdangerous import BadSignature, URLSafeTimedSerializer
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from registry import audit, keys
from registry.auth import repository as auth_repository
from registry.auth.principal import Role
from registry.auth.tokens import TOKEN_PREFIX, hash_token
from registry.clock import aware
from registry.errors import Forbidden, Unauthorized
from registry.keys import Purpose, keys_for
from registry.settings import get_settings
from registry.sso import grants, id_tokens, identities, pkce, provider, repository
from registry.sso.grants import Grant
from registry.sso.id_tokens import START_AGAIN, SignInRefused
from registry.tables import ApiToken, Identity, SsoSignIn, Tenant

log = logging.getLogger(__name__)
DASHBOARD, CLI = "dashboard", "cli"
EXCHANGE_WINDOW = timedelta(minutes=2)  # from the provider's answer to the CLI's exchange
MAX_STATE_CHARS = 128
MAX_CODE_CHARS = 2048


@dataclass(frozen=True)
class Begun:
    authorization_url: str
    cookie: str  # the sign-in's secrets, signed, for the browser that started it


@dataclass(frozen=True)
class Answer:
    """A sign-in whose state the provider's answer carried, now used."""
    sign_in_id: int
    purpose: str
    nonce: str
    verifier: str
    next_path: str | None
    cli_port: int | None


@dataclass(frozen=True)
class SignedOn:
    identity: Identity
    grant: Grant
    tenant: Tenant | None
    name: str
    issuer: str
    subject: str


def begin(*, redirect_uri: str, purpose: str, next_path: str | None = None, cli_port: int | None = None,
          cli_challenge: str | None = None) -> Begun:
    """A sign-in's secrets, in the cookie only: nothing is stored until the provider answers."""
    found = provider.provider()
    state, nonce = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    verifier = secrets.token_urlsafe(64)
    with _client(redirect_uri) as client:
        url, _ = client.create_authorization_url(found.authorization_endpoint, state=state, nonce=nonce,
                                                 code_verifier=verifier)
    cookie = _serializer().dumps({"state": state, "nonce": nonce, "verifier": verifier, "next": next_path,
                                  "purpose": purpose, "cli_port": cli_port, "cli_challenge": cli_challenge})
    return Begun(url, cookie)


def consume(session: Session, *, state: str | None, cookie: str | None) -> Answer:
    """The sign-in the provider answered, used from now on; SignInRefused when the answer is
    not this browser's, expired or replayed. Its state is stored here, once: a second answer
    with it meets the stored one."""
    if not state or len(state) > MAX_STATE_CHARS:
        raise SignInRefused("the identity provider's answer carries no sign-in state", code="sso_state_missing",
                            hint=START_AGAIN)
    started, signed_at = _unsigned(cookie)
    if started is None or not hmac.compare_digest(str(started.get("state", "")).encode(errors="replace"),
                                                  state.encode(errors="replace")):
        raise SignInRefused("this browser did not start the sign-in this answer is for (its sign-in "
                            "cookie is missing, expired or another sign-in's)", code="sso_state_not_this_browser",
                            hint=START_AGAIN)
    row = SsoSignIn(state_hash=_hash(state), purpose=started["purpose"], cli_port=started.get("cli_port"),
                    cli_challenge=started.get("cli_challenge"), used_at=datetime.now(UTC),
                    expires_at=signed_at + timedelta(seconds=get_settings().sso_sign_in_ttl_s))
    try:
        with session.begin_nested():
            session.add(row)
    except IntegrityError:
        raise SignInRefused("this sign-in's state was already used: the provider's answer was replayed",
                            code="sso_state_replayed", hint=START_AGAIN) from None
    return Answer(row.id, row.purpose, str(started["nonce"]), str(started["verifier"]),
                  started.get("next"), row.cli_port)


def sign_on(session: Session, answer: Answer, *, code: str | None, redirect_uri: str) -> SignedOn:
    """Exchange the code, check the ID token, map the claims, find the identity. The caller
    commits `consume` first: this talks to the provider."""
    settings = get_settings()
    if not code or len(code) > MAX_CODE_CHARS:
        raise SignInRefused("the identity provider's answer carries no authorization code",
                            code="sso_code_missing", hint=START_AGAIN)
    found = provider.provider()
    try:
        with _client(redirect_uri) as client:
            tokens = client.fetch_token(found.token_endpoint, grant_type="authorization_code", code=code,
                                        code_verifier=answer.verifier)
    except OAuthError as error:
        raise SignInRefused(f"the identity provider refused the authorization code ({error.error}: "
                            f"{str(error.description or '')[:200]}): it was already used, has expired, "
                            "or is another sign-in's", code="sso_code_refused", hint=START_AGAIN) from None
    except Exception as error:  # the provider cannot be reached or answered nonsense
        raise provider.ProviderUnavailable(
            f"the identity provider's token endpoint failed: {type(error).__name__}",
            hint="Try again; if it persists, check the provider.") from None
    claims = id_tokens.check(tokens.get("id_token"), id_tokens.Expected(
        issuer=found.issuer, client_id=settings.sso_client_id, nonce=answer.nonce,
        leeway_s=settings.sso_clock_skew_s))
    grant = grants.grant_for(claims)
    tenant = _tenant(session, grant)
    name = _name(claims)
    identity = identities.identity_for(session, found.issuer, claims["sub"], name,
                                       tenant.id if tenant else None)
    return SignedOn(identity, grant, tenant, name, found.issuer, claims["sub"])


SESSION_TOKEN, LOGIN_TOKEN = "sso-session", "sso-login"  # ApiToken.origin


def mint(session: Session, *, identity: Identity, name: str, role: Role, tenant: Tenant | None,
         ttl: timedelta, origin: str, how: dict[str, Any]) -> tuple[ApiToken, str]:
    """A token of the signed-on identity, with the role its claims gave."""
    plain = TOKEN_PREFIX + secrets.token_urlsafe(32)
    expires_at = datetime.now(UTC) + ttl
    row = ApiToken(token_hash=hash_token(plain), subject=name, identity_id=identity.id, role=role.value,
                   tenant_id=tenant.id if tenant else None, expires_at=expires_at, origin=origin)
    session.add(row)
    session.flush()
    audit.record(session, actor=f"{name} (sign-on)", action="sso.signed_on", subject=f"identity/{identity.id}",
                 tenant_id=tenant.id if tenant else None,
                 after={**how, "role": role.value, "tenant": tenant.name if tenant else None,
                        "token_id": row.id, "expires_at": expires_at.isoformat()})
    return row, plain


def mint_signed_on(session: Session, signed_on: SignedOn, ttl: timedelta) -> tuple[ApiToken, str]:
    """A dashboard session's token, never shown."""
    return mint(session, identity=signed_on.identity, name=signed_on.name, role=signed_on.grant.role,
                tenant=signed_on.tenant, ttl=ttl, origin=SESSION_TOKEN,
                how={"purpose": DASHBOARD, "issuer": signed_on.issuer, "subject": signed_on.subject,
                     "mapping": signed_on.grant.rule})


def hold_for_cli(session: Session, answer: Answer, signed_on: SignedOn) -> str:
    """What the CLI's loopback receives: a one-time code, exchanged with the CLI's verifier."""
    exchange_code = secrets.token_urlsafe(32)
    row = session.get(SsoSignIn, answer.sign_in_id)
    assert row is not None  # consumed in this request
    row.exchange_hash = _hash(exchange_code)
    row.identity_id, row.role = signed_on.identity.id, signed_on.grant.role.value
    row.tenant_id = signed_on.tenant.id if signed_on.tenant else None
    row.display_name = signed_on.name
    row.expires_at = datetime.now(UTC) + EXCHANGE_WINDOW
    row.grant_seal = keys.sign(Purpose.SSO_EXCHANGE, _grant(row))
    session.flush()
    return exchange_code


@dataclass(frozen=True)
class Login:
    row: ApiToken
    plain: str
    tenant: str | None


def exchange(session: Session, *, exchange_code: str, code_verifier: str) -> Login:
    """The CLI's token, once, for the code its loopback received and the verifier only it holds."""
    refused = Unauthorized("this login code is unknown, used, expired, or not this CLI's",
                           hint="Run `loraplane login` again.")
    row = repository.exchange_for_update(session, _hash(exchange_code))
    if row is None or row.exchanged_at is not None or aware(row.expires_at) <= datetime.now(UTC) \
            or row.cli_challenge is None or row.identity_id is None or row.role is None:
        raise refused
    if row.grant_seal is None or not keys.verifies_current(Purpose.SSO_EXCHANGE, _grant(row), row.grant_seal):
        log.error("sign-in %s holds a grant this registry did not seal: it was written outside the "
                  "registry, and grants nothing", row.id)
        raise refused
    if not hmac.compare_digest(row.cli_challenge, pkce.s256(code_verifier)):
        raise refused
    row.exchanged_at = datetime.now(UTC)
    identity = session.get(Identity, row.identity_id)
    tenant = session.get(Tenant, row.tenant_id) if row.tenant_id else None
    if identity is None:
        raise refused
    if tenant is not None and tenant.disabled_at is not None:
        raise Forbidden(f"tenant {tenant.name!r} is disabled", code="tenant_disabled",
                        hint="Ask a global admin to enable it.")
    token, plain = mint(session, identity=identity, name=row.display_name or identity.name,
                        role=Role(row.role), tenant=tenant,
                        ttl=timedelta(seconds=get_settings().sso_cli_token_ttl_s), origin=LOGIN_TOKEN,
                        how={"purpose": CLI, "sign_in": row.id})
    return Login(token, plain, tenant.name if tenant else None)


def forget_expired(session: Session) -> int:
    """The housekeeper's: sign-ins that can no longer be used either way."""
    return repository.forget_sign_ins_before(session, datetime.now(UTC) - timedelta(hours=1))


def _tenant(session: Session, grant: Grant) -> Tenant | None:
    if grant.tenant is None:
        return None
    tenant = auth_repository.find_tenant(session, grant.tenant)
    if tenant is None:
        raise Forbidden(f"your claims map to tenant {grant.tenant!r} (LORAPLANE_SSO_ROLE_MAPPINGS rule "
                        f"{grant.rule}), which does not exist", code="sso_tenant_missing",
                        hint="Ask a global admin to create it (loraplane tenant create), or to fix the mapping.")
    if tenant.disabled_at is not None:
        raise Forbidden(f"tenant {tenant.name!r} is disabled", code="tenant_disabled",
                        hint="Ask a global admin to enable it.")
    return tenant


def _name(claims: dict[str, Any]) -> str:
    for claim in (get_settings().sso_name_claim, "email", "preferred_username", "name", "sub"):
        value = claims.get(claim)
        if isinstance(value, str) and value.strip():
            return "".join(ch for ch in value.strip() if ch.isprintable())[:128]
    return "unnamed"


def _client(redirect_uri: str) -> OAuth2Client:
    settings = get_settings()
    secret = settings.sso_client_secret.get_secret_value() if settings.sso_client_secret else None
    return OAuth2Client(client_id=settings.sso_client_id, client_secret=secret,
                        token_endpoint_auth_method="client_secret_basic" if secret else "none",
                        scope=settings.sso_scopes, redirect_uri=redirect_uri,
                        code_challenge_method="S256", timeout=provider.TIMEOUT_S)


def _serializer() -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(list(reversed(keys_for(Purpose.SSO_STATE))), salt="loraplane-sso")


def _unsigned(cookie: str | None) -> tuple[dict[str, Any] | None, datetime]:
    """The sign-in the cookie holds, and when it was signed."""
    if not cookie or len(cookie) > 2048:
        return None, datetime.now(UTC)
    try:
        value, signed_at = _serializer().loads(cookie, max_age=get_settings().sso_sign_in_ttl_s,
                                               return_timestamp=True)
    except BadSignature:
        return None, datetime.now(UTC)
    if not isinstance(value, dict) or value.get("purpose") not in (DASHBOARD, CLI):
        return None, datetime.now(UTC)
    return value, signed_at


def _grant(row: SsoSignIn) -> bytes:
    """What a CLI's exchange trusts, as one message for its seal."""
    return json.dumps([row.id, row.exchange_hash, row.identity_id, row.role, row.tenant_id, row.display_name,
                       row.cli_challenge, aware(row.expires_at).astimezone(UTC).isoformat()],
                      separators=(",", ":")).encode()


def _hash(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()
