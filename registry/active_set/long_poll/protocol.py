"""The active-set answer, shared by the endpoint and the fast path: 304 while the node's
generation is current (after waiting up to `wait` seconds for a change), else the newest body."""

from __future__ import annotations

import time

from registry.active_set.long_poll.caches import ROUTERS
from registry.active_set.long_poll.state import LongPolls
from registry.auth.principal import Principal, Role
from registry.auth.service_accounts import pod_tokens
from registry.errors import Unauthorized
from registry.metrics import LONG_POLLS
from registry.settings import get_settings

async def answer(polls: LongPolls, pool: str, principal: Principal, known: int | None,
                 wait_s: float, node: str | None = None) -> tuple[int, int, bytes | None]:
    """(HTTP status, generation, body or None for a 304). With `node`, the body holds only what
    the placement gives that node; a node token always gets its own node's part, and a router
    token the routers' body, without files."""
    principal.require_pool_reader(pool)
    node = _own_node(principal, pool, node)
    watch, bodies = polls.watch, polls.bodies
    current = watch.known(pool)
    if current is None or (known is not None and known > current):
        # A pool this process has not seen yet (or none: 404 from here), or a node that already
        # read a newer generation from another replica whose news has not reached this one:
        # ask the database rather than hand the node an older set.
        current, _ = await bodies.get(pool, at_least=known)
        watch.observe(pool, current)
    if current == known and wait_s > 0:
        revocations, started = watch.revocations, time.monotonic()
        with LONG_POLLS.labels(pool).track_inprogress():
            current = await watch.wait_beyond(pool, known, wait_s)
        # The token may have been revoked, or have expired, while the request waited: check it
        # again when any revocation was heard of, or when the wait outlived the token cache
        # (a process that hears of revocations late, such as on SQLite).
        waited_long = time.monotonic() - started >= get_settings().auth_cache_s
        if current != known and principal.expires_at is not None:
            _still_in_time(principal)  # a pod's token: only its time can run out
        elif current != known and (watch.revocations != revocations or waited_long):
            await polls.rechecks.still_valid(principal.token_id)
    if current == known:
        return 304, known, None
    generation, body = await bodies.get(pool, at_least=current,
                                        node=ROUTERS if principal.role is Role.ROUTER else node)
    watch.observe(pool, generation)
    return 200, generation, body


def _still_in_time(principal: Principal) -> None:
    if not pod_tokens.still_holds(principal):
        raise Unauthorized("the service-account token expired while the request waited",
                           code="k8s_token_expired", hint="Send the pod's current token, which "
                                                          "the kubelet renews on disk.")


def _own_node(principal: Principal, pool: str, node: str | None) -> str | None:
    if principal.role is not Role.NODE:
        return node
    if node is not None or principal.instance_id is None:
        principal.require_instance(pool, node or "NODE_ID", Role.NODE)
    return principal.instance_id


def generation_in(if_none_match: str | None) -> int | None:
    if not if_none_match:
        return None
    tag = if_none_match.split(",")[0].strip().removeprefix("W/").strip('"')
    return int(tag) if tag.isdigit() and len(tag) < 19 else None


def headers(generation: int) -> dict[str, str]:
    return {"ETag": f'"{generation}"', "Cache-Control": "no-cache"}
