"""Sign on through the identity provider: /ui/sso/start sends the browser there, and
/ui/sso/callback takes its answer (registry/sso/sign_ins.py). A dashboard sign-on starts a
session as a token sign-in does; a CLI's (`loraplane login`) hands the CLI a one-time code on its
loopback address."""

from __future__ import annotations

import html
from datetime import timedelta
from urllib.parse import urlencode, urlsplit

from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import HTMLResponse, Response
from sqlalchemy.orm import Session

from registry.auth import tokens
from registry.errors import LoraplaneError, Unprocessable
from registry.request_session import RequestSession, commit_so_far, discard
from registry.settings import get_settings
from registry.sso import pkce, provider, sign_ins
from web.pages.sign_in import safe_next, sso_offer
from web.rendering import SECURITY_HEADERS, PageRoute, page, see_other
from web.session import (LOOPBACK_HOSTS, SESSION_MAX_AGE_S, Visit, check_csrf, remember_nonce, start_session,
                         visitor, with_nonce)

router = APIRouter(route_class=PageRoute)
COOKIE, COOKIE_PATH = "loraplane_sso", "/ui/sso"
CALLBACK = "/ui/sso/callback"
CHALLENGE = r"^[A-Za-z0-9_-]{43}$"  # an S256 challenge: 32 bytes, base64url without padding


@router.get("/ui/sso/start")
def start(request: Request, next: str | None = Query(None, max_length=300),
          cli_port: int | None = Query(None, ge=1024, le=65535),
          cli_challenge: str | None = Query(None, pattern=CHALLENGE),
          visit: Visit = Depends(visitor)) -> Response:
    """A dashboard sign-on goes to the provider at once; a CLI's first shows its confirmation
    code, so that nobody signs on for a command someone else started (a link sent to them)."""
    if (cli_port is None) != (cli_challenge is None):
        raise Unprocessable("a CLI sign-on needs both cli_port and cli_challenge", code="invalid_cli_sign_on",
                            hint="Run `loraplane login`, which sends both.")
    if cli_port is None or cli_challenge is None:
        return _to_provider(request, sign_ins.begin(redirect_uri=_callback_url(), purpose=sign_ins.DASHBOARD,
                                                    next_path=safe_next(next)))
    visit = with_nonce(visit)
    response = page(request, visit, "sso_confirm.html", cli_port=cli_port, cli_challenge=cli_challenge,
                    code=pkce.confirmation_code(cli_challenge), provider=get_settings().sso_provider_name)
    remember_nonce(request, response, visit)
    # The form's answer redirects to the provider, which the page's form-action must allow.
    authorize = urlsplit(provider.provider().authorization_endpoint)
    response.headers["Content-Security-Policy"] = SECURITY_HEADERS["Content-Security-Policy"].replace(
        "form-action 'self'", f"form-action 'self' {authorize.scheme}://{authorize.netloc}")
    return response


@router.post("/ui/sso/start")
def confirm_cli(request: Request, cli_port: int = Form(..., ge=1024, le=65535),
                cli_challenge: str = Form(..., pattern=CHALLENGE), csrf_token: str = Form("", max_length=128),
                visit: Visit = Depends(visitor)) -> Response:
    check_csrf(visit, csrf_token)
    return _to_provider(request, sign_ins.begin(redirect_uri=_callback_url(), purpose=sign_ins.CLI,
                                                cli_port=cli_port, cli_challenge=cli_challenge))


def _to_provider(request: Request, begun: sign_ins.Begun) -> Response:
    response = see_other(begun.authorization_url)
    # Lax, not Strict: the provider's answer is a top-level navigation from its site.
    response.set_cookie(COOKIE, begun.cookie, max_age=get_settings().sso_sign_in_ttl_s, path=COOKIE_PATH,
                        httponly=True, samesite="lax", secure=_secure(request))
    return response


@router.get(CALLBACK)
def callback(request: Request, state: str | None = Query(None, max_length=128),
             code: str | None = Query(None, max_length=2048),
             error: str | None = Query(None, max_length=100),
             error_description: str | None = Query(None, max_length=300),
             visit: Visit = Depends(visitor), session: Session = RequestSession) -> Response:
    try:
        if error is not None:  # (some providers send no state with a refusal: it grants nothing)
            said = _plain(error) + (f": {_plain(error_description)}" if error_description else "")
            raise sign_ins.SignInRefused(
                f"the identity provider did not sign you in ({said})",
                code="sso_denied", hint="Start the sign-in again, or ask the provider's admins.")
        answer = sign_ins.consume(session, state=state, cookie=request.cookies.get(COOKIE))
        commit_so_far(request)  # the state is used now, whatever happens next: no answer is taken twice
        signed_on = sign_ins.sign_on(session, answer, code=code, redirect_uri=_callback_url())
        if answer.purpose == sign_ins.CLI:
            exchange_code = sign_ins.hold_for_cli(session, answer, signed_on)
            response: Response = see_other(f"http://127.0.0.1:{answer.cli_port}/callback?"
                                           + urlencode({"code": exchange_code}))
        else:
            response = _signed_in(request, session, signed_on, safe_next(answer.next_path))
    except provider.ProviderUnavailable:
        raise
    except LoraplaneError as refused:
        discard(request)  # nothing of the failed sign-on stays, but the used state (committed)
        response = page(request, with_nonce(visit), "sign_in.html", status=refused.status,
                        next="/ui/approvals", error=refused, sso=sso_offer())
        remember_nonce(request, response, with_nonce(visit))
    response.delete_cookie(COOKIE, path=COOKIE_PATH)
    return response


def _signed_in(request: Request, session: Session, signed_on: sign_ins.SignedOn, next_path: str) -> Response:
    row, _ = sign_ins.mint_signed_on(session, signed_on, timedelta(seconds=SESSION_MAX_AGE_S))
    # A page, not a redirect: the session cookie is SameSite=Strict, and a redirect that goes on
    # from the provider's navigation would not carry it; this page's own navigation does.
    target = html.escape(next_path, quote=True)
    response = HTMLResponse(
        f'<!doctype html><meta http-equiv="refresh" content="0;url={target}">'
        f'<title>Signed in</title><p>Signed in. <a href="{target}">Continue</a></p>', headers=SECURITY_HEADERS)
    start_session(session, request, response, tokens.principal_by_id(session, row.id))
    return response


def _plain(text: str, limit: int = 120) -> str:
    """A provider's error, as letters, digits and plain punctuation only: it comes from the
    address bar, so anyone could put words there."""
    return "".join(ch for ch in text if ch.isascii() and (ch.isalnum() or ch in " ._-,:'()"))[:limit]


def _callback_url() -> str:
    return get_settings().public_url.rstrip("/") + CALLBACK


def _secure(request: Request) -> bool:
    return request.url.scheme == "https" or request.url.hostname not in LOOPBACK_HOSTS

