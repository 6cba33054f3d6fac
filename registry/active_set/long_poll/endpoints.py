"""GET /v1/pools/{pool}/active-set: ETag is the generation, If-None-Match gets a 304, and
?wait=S long-polls until the generation changes. Most requests are answered by the fast path
(fast_path.py) with the same `protocol.answer`; this route serves the rest and the schema.

Unlike other routes it takes no request session: a long poll must hold no transaction or pooled
connection while it waits, so the token check (PrincipalCache) and each read open short ones."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.security import HTTPAuthorizationCredentials

from registry.active_set.long_poll import protocol
from registry.active_set.reading.schemas import ActiveSet
from registry.active_set.long_poll import state
from registry.auth.dependencies import bearer
from registry.names import NAME_PATTERN

router = APIRouter(prefix="/v1/pools", tags=["active set"])
MAX_WAIT_S = 300


@router.get("/{pool}/active-set", response_model=ActiveSet,
            responses={304: {"description": "Unchanged since the generation in If-None-Match."}})
async def get_active_set(
    request: Request,
    pool: str,
    wait: float = Query(0, ge=0, le=MAX_WAIT_S, description=(
        "Long-poll: answer when the generation changes, or with 304 after this many seconds.")),
    node: str | None = Query(None, pattern=NAME_PATTERN.pattern, max_length=64, description=(
        "A serving node's id: answer only what the placement gives that node.")),
    if_none_match: str | None = Header(None, max_length=200),
    credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
):
    polls = state.of(request.app)
    principal = await polls.principals.authenticate(credentials.credentials if credentials else None)
    status, generation, body = await protocol.answer(
        polls, pool, principal, protocol.generation_in(if_none_match), wait, node)
    if body is None:
        return Response(status_code=status, headers=protocol.headers(generation))
    return Response(body, media_type="application/json", headers=protocol.headers(generation))
