"""GET /v1/pools/{pool}/active-set: ETag is the generation, If-None-Match gets a 304, and
?wait=S long-polls until the generation changes."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Header, Query, Response
from fastapi.security import HTTPAuthorizationCredentials

from registry.active_set.schemas import ActiveSet
from registry.active_set.serving import BodyCache, PrincipalCache
from registry.active_set.watch import WATCH
from registry.auth.dependencies import bearer
from registry.settings import get_settings

router = APIRouter(prefix="/v1/pools", tags=["active set"])
principals = PrincipalCache(get_settings().auth_cache_s)
bodies = BodyCache()
WATCH.on_token_revoked.append(principals.clear)


@router.get("/{pool}/active-set", response_model=ActiveSet,
            responses={304: {"description": "Unchanged since the generation in If-None-Match."}})
async def get_active_set(
    pool: str,
    wait: float = Query(0, ge=0, le=300, description="Long-poll: answer when the generation "
                                                     "changes, or with 304 after this many seconds."),
    if_none_match: str | None = Header(None, max_length=200),
    credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
):
    principal = await principals.authenticate(credentials.credentials if credentials else None)
    principal.require_node_of(pool)
    known = _generation_in(if_none_match)
    current = WATCH.known(pool)
    if current is None:  # a pool this process has not seen yet (or none: 404 from here)
        current, _ = await bodies.get(pool, at_least=None)
        WATCH.observe(pool, current)
    if current == known and wait > 0:
        current = await WATCH.wait_beyond(pool, known, wait)
    if current == known:
        return Response(status_code=304, headers=_headers(known))
    generation, body = await bodies.get(pool, at_least=current)
    WATCH.observe(pool, generation)
    return Response(body, media_type="application/json", headers=_headers(generation))


def _headers(generation: int) -> dict[str, str]:
    return {"ETag": f'"{generation}"', "Cache-Control": "no-cache"}


def _generation_in(if_none_match: str | None) -> int | None:
    if not if_none_match:
        return None
    tag = if_none_match.split(",")[0].strip().removeprefix("W/").strip('"')
    return int(tag) if tag.isdigit() and len(tag) < 19 else None
