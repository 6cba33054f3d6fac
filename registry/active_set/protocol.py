"""The active-set answer, shared by the endpoint and the fast path: 304 while the node's
generation is current (after waiting up to `wait` seconds for a change), else the newest body."""

from __future__ import annotations

from registry.active_set.serving import BodyCache
from registry.active_set.watch import WATCH
from registry.auth.principal import Principal

bodies = BodyCache()


async def answer(pool: str, principal: Principal, known: int | None, wait_s: float,
                 node: str | None = None) -> tuple[int, int, bytes | None]:
    """(HTTP status, generation, body or None for a 304). With `node`, the body holds only what
    the placement gives that node."""
    principal.require_pool_reader(pool)
    current = WATCH.known(pool)
    if current is None or (known is not None and known > current):
        # A pool this process has not seen yet (or none: 404 from here), or a node that already
        # read a newer generation from another replica whose news has not reached this one:
        # ask the database rather than hand the node an older set.
        current, _ = await bodies.get(pool, at_least=known)
        WATCH.observe(pool, current)
    if current == known and wait_s > 0:
        current = await WATCH.wait_beyond(pool, known, wait_s)
    if current == known:
        return 304, known, None
    generation, body = await bodies.get(pool, at_least=current, node=node)
    WATCH.observe(pool, generation)
    return 200, generation, body


def generation_in(if_none_match: str | None) -> int | None:
    if not if_none_match:
        return None
    tag = if_none_match.split(",")[0].strip().removeprefix("W/").strip('"')
    return int(tag) if tag.isdigit() and len(tag) < 19 else None


def headers(generation: int) -> dict[str, str]:
    return {"ETag": f'"{generation}"', "Cache-Control": "no-cache"}
