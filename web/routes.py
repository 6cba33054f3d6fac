"""The dashboard's pages, mounted by the registry under /ui."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.staticfiles import StaticFiles

from registry.request_session import RequestSession
from web.pages import adapters, approvals, audit, pools, sign_in, sso, tenants, tokens, versions

STATIC = StaticFiles(directory=Path(__file__).parent / "static")

# Every page opens its request's session first, even one whose own parameters are refused: the
# error page that answers then reads the visitor in it.
router = APIRouter(include_in_schema=False, dependencies=[RequestSession])
for pages in (sign_in, sso, approvals, versions, adapters, pools, audit, tokens, tenants):
    router.include_router(pages.router)
