"""Dashboard sessions. Signing in with an API token stores a session row and sets a cookie that
holds the session's random secret (never the token); only the secret's hash is stored. Every
request reloads the session and its token, so signing out, revoking the token or its expiry
ends the session at once. The cookie is HttpOnly and SameSite=Strict, and Secure unless the
dashboard is reached over plain HTTP on a loopback address (serve it over HTTPS, or behind a
proxy that says so).

Every form carries a CSRF token: an HMAC, under a key used for nothing else, of a nonce the
server chose. Before sign-in that nonce lives in a cookie the server signs, so a visitor cannot
pick it, and the sign-in form is covered too."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from fastapi import Depends, Request
from fastapi.responses import Response
from itsdangerous import BadSignature, URLSafeTimedSerializer
from sqlalchemy.orm import Session

from registry.auth import repository, tokens
from registry.auth.principal import Principal, Role
from registry.clock import aware
from registry.errors import Forbidden, Unauthorized
from registry.keys import Purpose, keys_for
from registry.request_session import RequestSession
from registry.tables import ApiToken, DashboardSession

SESSION_COOKIE, ANONYMOUS_COOKIE = "loraplane_session", "loraplane_visit"
SESSION_MAX_AGE_S = 12 * 3600
ANONYMOUS_MAX_AGE_S = 3600
DASHBOARD_ROLES = {Role.ADMIN, Role.REVIEWER, Role.UPLOADER}
LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]"}
MAX_COOKIE_CHARS = 512  # ours are about 100; a larger one is not worth verifying


class SignInRequired(Exception):
    """No valid session: the page sends the browser to the sign-in form."""


@dataclass(frozen=True)
class Visit:
    principal: Principal | None
    nonce: str  # the session's secret, or an anonymous visit's server-chosen nonce
    fresh: bool = False  # an anonymous nonce not yet in the visitor's cookie

    @property
    def csrf_token(self) -> str:
        return self.csrf_tokens()[0]

    def csrf_tokens(self) -> list[str]:
        """Under the current secret first, then under the previous ones (a form opened before a
        rotation still submits)."""
        scope = b"session:" if self.principal else b"anonymous:"
        return [hmac.new(key, scope + self.nonce.encode(), hashlib.sha256).hexdigest()
                for key in keys_for(Purpose.CSRF)]


@dataclass(frozen=True)
class SignedInVisit(Visit):
    """A visit `viewer` let through: it has a principal."""
    principal: Principal


def check_csrf(visit: Visit, submitted: str | None) -> None:
    if not visit.nonce or not submitted or not any(
            hmac.compare_digest(submitted.encode(errors="replace"), expected.encode())
            for expected in visit.csrf_tokens()):
        raise Forbidden("this form's CSRF token is missing or does not match your session",
                        code="csrf_failed", hint="Reload the page and submit the form again.")


def _serializer(kind: str) -> URLSafeTimedSerializer:
    # itsdangerous signs with the last key and accepts each: the previous secrets', oldest first.
    keys = list(reversed(keys_for(Purpose.DASHBOARD_SESSIONS)))
    return URLSafeTimedSerializer(keys, salt=f"loraplane-{kind}")


def _unsigned(request: Request, cookie: str, kind: str, max_age: int) -> str | None:
    raw = request.cookies.get(cookie)
    if not raw or len(raw) > MAX_COOKIE_CHARS:
        return None
    try:
        value = _serializer(kind).loads(raw, max_age=max_age)
    except BadSignature:
        return None
    return value if isinstance(value, str) and value else None


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def visit_of(session: Session, request: Request) -> Visit:
    """Who is looking: a signed-in principal, or an anonymous visit with its own nonce."""
    secret = _unsigned(request, SESSION_COOKIE, "session", SESSION_MAX_AGE_S)
    if secret:
        row = repository.dashboard_session(session, _hash(secret))
        if row is not None and row.ended_at is None and aware(row.expires_at) > datetime.now(UTC):
            try:
                return Visit(tokens.principal_by_id(session, row.token_id), secret)
            except Unauthorized:
                pass
    return Visit(None, _unsigned(request, ANONYMOUS_COOKIE, "anonymous", ANONYMOUS_MAX_AGE_S) or "")


def visitor(request: Request, session: Session = RequestSession) -> Visit:
    """A page's dependency: whoever is looking, signed in or not (the sign-in pages)."""
    return visit_of(session, request)


def viewer(visit: Visit = Depends(visitor)) -> SignedInVisit:
    """A page's dependency: the signed-in visit, or a redirect to sign in."""
    if visit.principal is None:
        raise SignInRequired()
    return SignedInVisit(visit.principal, visit.nonce, visit.fresh)


def sign_in(session: Session, plain_token: str) -> Principal:
    principal = tokens.authenticate(session, plain_token.strip() or None)
    if principal.role not in DASHBOARD_ROLES:
        raise Forbidden(f"a {principal.role} token cannot sign in to the dashboard",
                        code="not_a_person_token",
                        hint="Sign in with your reviewer, uploader or admin token.")
    return principal


def start_session(session: Session, request: Request, response: Response,
                  principal: Principal) -> None:
    secret = secrets.token_urlsafe(32)
    session.add(DashboardSession(
        secret_hash=_hash(secret), token_id=principal.token_id,
        expires_at=datetime.now(UTC) + timedelta(seconds=SESSION_MAX_AGE_S)))
    session.flush()
    _set(request, response, SESSION_COOKIE, _serializer("session").dumps(secret), SESSION_MAX_AGE_S)
    response.delete_cookie(ANONYMOUS_COOKIE, path="/ui")


def with_nonce(visit: Visit) -> Visit:
    """An anonymous visit without a nonce gets one; `remember_nonce` then sets its cookie."""
    return visit if visit.nonce else Visit(None, secrets.token_urlsafe(24), fresh=True)


def remember_nonce(request: Request, response: Response, visit: Visit) -> None:
    if visit.fresh:
        _set(request, response, ANONYMOUS_COOKIE, _serializer("anonymous").dumps(visit.nonce),
             ANONYMOUS_MAX_AGE_S)


def end_session(session: Session, visit: Visit, response: Response) -> None:
    """Sign out: the session row ends, so the cookie is worthless even if it was copied."""
    if visit.principal is not None:
        row = repository.lock_dashboard_session(session, _hash(visit.nonce))
        if row is not None and row.ended_at is None:
            row.ended_at = datetime.now(UTC)
            token = session.get(ApiToken, row.token_id)
            if token is not None and token.origin == "sso-session" and token.revoked_at is None:
                token.revoked_at = row.ended_at  # made for this session alone, and never shown
            session.flush()
    response.delete_cookie(SESSION_COOKIE, path="/ui")


def _set(request: Request, response: Response, name: str, value: str, max_age: int) -> None:
    response.set_cookie(name, value, max_age=max_age, path="/ui", httponly=True, samesite="strict",
                        secure=request.url.scheme == "https" or request.url.hostname not in LOOPBACK_HOSTS)
