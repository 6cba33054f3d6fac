"""Single sign-on's API: whether it is on, the CLI's one-time exchange of a login code for a
token, and linking another identity of yours. The browser's side is the dashboard's
(web/pages/sso.py)."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from sqlalchemy.orm import Session

from registry.auth.dependencies import authenticated
from registry.auth.principal import Principal
from registry.request_session import RequestSession
from registry.settings import get_settings
from registry.sso import linking, sign_ins
from registry.sso.schemas import ExchangeIn, LinkIn, LinkOut, LoginOut, SsoOut

router = APIRouter(tags=["single sign-on"])
START_PATH = "/ui/sso/start"


@router.get("/v1/sso", response_model=SsoOut, summary="Whether people sign on here (anonymous)")
def sso_configuration():
    settings = get_settings()
    return SsoOut(enabled=settings.sso_enabled,
                  provider=settings.sso_provider_name if settings.sso_enabled else None,
                  start_path=START_PATH if settings.sso_enabled else None)


@router.post("/v1/sso/token", response_model=LoginOut,
             summary="Exchange a login code for a token, once (anonymous: the code and verifier prove it)")
def exchange_login_code(spec: ExchangeIn, session: Session = RequestSession):
    """What `loraplane login` calls with the code its loopback received and the PKCE verifier
    only it holds. Each code works once, for two minutes."""
    login = sign_ins.exchange(session, exchange_code=spec.exchange_code, code_verifier=spec.code_verifier)
    return LoginOut(token=login.plain, expires_at=login.row.expires_at, subject=login.row.subject,
                    role=login.row.role, tenant=login.tenant, identity_id=login.row.identity_id)


@router.post("/v1/identities/link", response_model=LinkOut)
def link_identity(spec: LinkIn, principal: Principal = Depends(authenticated),
                  session: Session = RequestSession):
    """Link your identity with the identity of another token you hold: four-eyes then treats
    them as one person. Links only ever join."""
    return LinkOut(identities=linking.link(session, principal, spec.token))
