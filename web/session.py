"""Dashboard sessions. Signing in with an API token sets a signed cookie that names the token's
id (never the token) and a random nonce; every request reloads the token, so revoking it ends its
sessions. The cookie is HttpOnly and SameSite=Strict, and Secure unless the dashboard is reached over
plain HTTP on a loopback address (serve it over HTTPS, or behind a proxy that says so).

Every form carries a CSRF token: an HMAC of the nonce under the registry's key. Before sign-in,
the nonce lives in a cookie of its own, so the sign-in form is covered too."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from fastapi import Request
from fastapi.responses import Response
from itsdangerous import BadSignature, URLSafeTimedSerializer

from registry.auth import tokens
from registry.auth.principal import Principal, Role
from registry.db import transaction
from registry.errors import Forbidden, Unauthorized
from registry.settings import get_settings

SESSION_COOKIE, ANONYMOUS_COOKIE = "loraplane_session", "loraplane_visit"
SESSION_MAX_AGE_S = 12 * 3600
DASHBOARD_ROLES = {Role.ADMIN, Role.REVIEWER, Role.UPLOADER}
LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]"}


class SignInRequired(Exception):
    """No valid session: the page sends the browser to the sign-in form."""


@dataclass(frozen=True)
class Visit:
    principal: Principal | None
    nonce: str

    @property
    def csrf_token(self) -> str:
        return csrf_token(self.nonce)


def csrf_token(nonce: str) -> str:
    return hmac.new(get_settings().signing_key(), b"csrf:" + nonce.encode(), hashlib.sha256).hexdigest()


def check_csrf(visit: Visit, submitted: str | None) -> None:
    if not visit.nonce or not submitted or not hmac.compare_digest(
            submitted.encode(errors="replace"), visit.csrf_token.encode()):
        raise Forbidden("this form's CSRF token is missing or does not match your session",
                        code="csrf_failed", hint="Reload the page and submit the form again.")


def _serializer() -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(get_settings().signing_key(), salt="loraplane-dashboard-session")


def visit_of(request: Request) -> Visit:
    """Who is looking: a signed-in principal, or an anonymous visit with its own nonce."""
    raw = request.cookies.get(SESSION_COOKIE)
    if raw:
        try:
            token_id, nonce = _serializer().loads(raw, max_age=SESSION_MAX_AGE_S)
        except (BadSignature, ValueError, TypeError):
            pass
        else:
            with transaction() as session:
                try:
                    return Visit(tokens.principal_by_id(session, int(token_id)), nonce)
                except Unauthorized:
                    pass
    return Visit(None, request.cookies.get(ANONYMOUS_COOKIE) or "")


def viewer(request: Request) -> Visit:
    """A page's dependency: the signed-in visit, or a redirect to sign in."""
    visit = visit_of(request)
    if visit.principal is None:
        raise SignInRequired()
    return visit


def sign_in(plain_token: str) -> Principal:
    with transaction() as session:
        principal = tokens.authenticate(session, plain_token.strip() or None)
    if principal.role not in DASHBOARD_ROLES:
        raise Forbidden(f"a {principal.role} token cannot sign in to the dashboard",
                        code="not_a_person_token",
                        hint="Sign in with your reviewer, uploader or admin token.")
    return principal


def start_session(request: Request, response: Response, principal: Principal) -> None:
    value = _serializer().dumps([principal.token_id, secrets.token_urlsafe(24)])
    _set(request, response, SESSION_COOKIE, value, SESSION_MAX_AGE_S)
    response.delete_cookie(ANONYMOUS_COOKIE, path="/ui")


def with_nonce(visit: Visit) -> Visit:
    """An anonymous visit without a nonce gets one; `remember_nonce` then sets its cookie."""
    return visit if visit.nonce else Visit(None, secrets.token_urlsafe(24))


def remember_nonce(request: Request, response: Response, visit: Visit) -> None:
    if request.cookies.get(ANONYMOUS_COOKIE) != visit.nonce:
        _set(request, response, ANONYMOUS_COOKIE, visit.nonce, 3600)


def end_session(response: Response) -> None:
    response.delete_cookie(SESSION_COOKIE, path="/ui")


def _set(request: Request, response: Response, name: str, value: str, max_age: int) -> None:
    response.set_cookie(name, value, max_age=max_age, path="/ui", httponly=True, samesite="strict",
                        secure=request.url.scheme == "https" or request.url.hostname not in LOOPBACK_HOSTS)
