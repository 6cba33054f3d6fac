"""What the active-set endpoint needs to answer a thousand long-polls cheaply: tokens checked
once per few seconds instead of once per request, and each generation's body rendered once."""

from __future__ import annotations

import asyncio
import hashlib
import time

from cachetools import TTLCache
from starlette.concurrency import run_in_threadpool

from registry.active_set.reading import snapshot
from registry.auth import tokens
from registry.auth.principal import Principal
from registry.auth.service_accounts import pod_tokens
from registry.collector import collector_paused
from registry.db import plain_transaction
from registry.metrics import BODY_RENDERS
from registry.settings import get_settings
from registry.storage import get_store


class PrincipalCache:
    """Checked tokens by hash, for `auth_cache_s`. Cleared at once when any token is revoked
    (via the same notifications that carry generations). Concurrent misses of one token share a
    single lookup, so a fleet on one token does not stampede the database when it expires."""

    def __init__(self, ttl_s: float) -> None:
        self._cache: TTLCache | None = TTLCache(maxsize=100_000, ttl=ttl_s) if ttl_s > 0 else None
        self._lookups: dict[bytes, asyncio.Future] = {}
        self._epoch = 0  # bumped by clear(): a lookup begun before a revocation is not kept

    async def authenticate(self, plain: str | None) -> Principal:
        principal = self.peek(plain)
        if principal is not None:
            return principal
        cache = self._cache
        if cache is None or not plain:
            return await run_in_threadpool(_authenticate, plain)
        key = hashlib.sha256(plain.encode()).digest()
        lookup = self._lookups.get(key)
        if lookup is None:
            lookup = asyncio.ensure_future(run_in_threadpool(_authenticate, plain))
            self._lookups[key] = lookup
            epoch = self._epoch
            lookup.add_done_callback(lambda done: self._store(cache, key, done, epoch))
        return await asyncio.shield(lookup)

    def _store(self, cache: TTLCache, key: bytes, done: asyncio.Future, epoch: int) -> None:
        if self._lookups.get(key) is done:
            del self._lookups[key]
        if epoch == self._epoch and not done.cancelled() and done.exception() is None:
            cache[key] = done.result()

    def peek(self, plain: str | None) -> Principal | None:
        """The cached principal of this token, without touching the database."""
        if self._cache is None or not plain:
            return None
        principal = self._cache.get(hashlib.sha256(plain.encode()).digest())
        # A pod's token is never kept past its expiry: it is checked again, and refused.
        return principal if principal is None or pod_tokens.still_holds(principal) else None

    def clear(self) -> None:
        self._epoch += 1
        self._lookups.clear()
        if self._cache is not None:
            self._cache.clear()


def _authenticate(plain: str | None) -> Principal:
    with plain_transaction() as session:
        return tokens.authenticate(session, plain)


# The routers' body, in the node slot of the cache's keys: no node can be named so.
ROUTERS = "#routers"


class BodyCache:
    """The rendered JSON of each pool's newest generation: the whole set, each node's part
    (?node=) while the set is spread over the nodes, and the routers' body. Each is rendered once
    per generation, however many polls a change wakes: the whole set first, and a node's part
    only when the whole set says the set is spread (otherwise a node's part is the whole set).
    Presigned URLs are renewed when half their lifetime has passed, so a node never receives one
    about to expire.

    Routers get names, digests, aliases, weights and placement only: no file URLs, which would
    let a router token download every tenant's weights, and no attestations, which they do not
    check."""

    def __init__(self) -> None:
        self._bodies: dict[tuple[str, str | None], tuple[int, bytes, float]] = {}
        self._locks: dict[tuple[str, str | None], asyncio.Lock] = {}
        self._spread: dict[str, tuple[int, bool]] = {}  # pool -> (generation, spread over nodes)

    async def get(self, pool: str, at_least: int | None, node: str | None = None) -> tuple[int, bytes]:
        """`node`: a node's id for its part, ROUTERS for the routers' body, None for the whole."""
        if node == ROUTERS:
            return await self._get_rendered((pool, ROUTERS), at_least)
        generation, body = await self._get_rendered((pool, None), at_least)
        if node is None or self._spread.get(pool) != (generation, True):
            return generation, body
        return await self._get_rendered((pool, node), generation)

    async def _get_rendered(self, key: tuple[str, str | None], at_least: int | None) -> tuple[int, bytes]:
        cached = self._fresh(key, at_least)
        if cached:
            return cached
        async with self._locks.setdefault(key, asyncio.Lock()):  # one render per wake-up
            cached = self._fresh(key, at_least)
            if cached:
                return cached
            generation, body, spread = await run_in_threadpool(_render, key[0], key[1])
            if key[1] is None:
                self._spread[key[0]] = (generation, spread)
            self._store(key, generation, body)
            return generation, body

    def _store(self, key: tuple[str, str | None], generation: int, body: bytes) -> None:
        self._bodies[key] = (generation, body, time.monotonic())
        # Parts of older generations are never served again: drop them (nodes come and go).
        stale = [k for k, (g, _, _) in self._bodies.items() if k[0] == key[0] and g < generation]
        for old in stale:
            del self._bodies[old]
            self._locks.pop(old, None)

    def _fresh(self, key: tuple[str, str | None], at_least: int | None) -> tuple[int, bytes] | None:
        cached = self._bodies.get(key)
        if cached is None:
            return None
        generation, body, rendered_at = cached
        young = time.monotonic() - rendered_at < get_settings().presign_ttl_s / 2
        if young and (at_least is None or generation >= at_least):
            return generation, body
        return None


def _render(pool: str, node: str | None) -> tuple[int, bytes, bool]:
    """(generation, body, whether the set is spread over the pool's nodes)."""
    for_routers = node == ROUTERS
    with collector_paused(), plain_transaction() as session:
        active = snapshot.read(session, pool, get_store(), get_settings(),
                               None if for_routers else node, with_files=not for_routers)
    spread = any(entry.nodes is not None for entry in active.entries)
    BODY_RENDERS.labels(pool).inc()
    if for_routers:
        body = active.model_dump_json(exclude={"entries": {"__all__": {"files", "attestation"}},
                                               "urls_expire_in": True})
        return active.generation, body.encode(), spread
    return active.generation, active.model_dump_json().encode(), spread
