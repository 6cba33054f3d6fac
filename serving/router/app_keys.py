"""App keys, checked by the registry (`GET /v1/whoami` with the key itself) and trusted here for
`key_cache_s`; past half of that, a request still uses the cached answer while the key is checked
again in the background, so steady traffic never waits for the registry. The router stores no
key: only their sha256 names cache entries.

Concurrent requests with one unchecked key share a single lookup; a refused key is remembered
for a moment, so a client retrying a bad key in a loop does not hammer the registry. A value that
cannot be a key is refused without asking, and at most `MAX_LOOKUPS` keys are checked at once,
so a flood of made-up keys costs the registry a bounded trickle of lookups."""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from dataclasses import dataclass

import httpx
from cachetools import TTLCache

from serving.router.errors import RouterError

REFUSAL_CACHE_S = 2.0
MAX_LOOKUPS = 16
TIERS = ("interactive", "batch")
# The shape of the registry's tokens: "lpt_" and 32 random bytes in URL-safe base64.
KEY_SHAPE = re.compile(r"Bearer lpt_[A-Za-z0-9_-]{43}")


@dataclass(frozen=True)
class App:
    subject: str
    tenant: str
    tier: str


class AppKeys:
    def __init__(self, registry_url: str, ttl_s: float, timeout_s: float = 10) -> None:
        self._http = httpx.AsyncClient(base_url=registry_url, timeout=timeout_s)
        self._ttl_s, self._timeout_s = ttl_s, timeout_s
        self._apps: TTLCache = TTLCache(maxsize=100_000, ttl=ttl_s or 1e-9)  # key -> (App, checked at)
        self._refused: TTLCache = TTLCache(maxsize=100_000, ttl=min(REFUSAL_CACHE_S, ttl_s or 1e-9))
        self._lookups: dict[bytes, asyncio.Future] = {}
        self._lookup_slots = asyncio.Semaphore(MAX_LOOKUPS)

    async def authenticate(self, authorization: str | None) -> App:
        if not authorization or not KEY_SHAPE.fullmatch(authorization):
            raise RouterError(401, "missing_api_key", "missing or malformed API key",
                              "Send 'Authorization: Bearer <app key>' (loraplane token create --role app).")
        key = hashlib.sha256(authorization.encode()).digest()
        if (known := self._apps.get(key)) is not None:
            app, checked_at = known
            if time.monotonic() - checked_at > self._ttl_s / 2:
                self._lookup(key, authorization)  # refresh ahead, off the request's path
            return app
        if (refusal := self._refused.get(key)) is not None:
            raise refusal.copy()  # a fresh error: re-raising one object grows its traceback
        return await asyncio.shield(self._lookup(key, authorization))

    def _lookup(self, key: bytes, authorization: str) -> asyncio.Future:
        """The check of this key under way, or a new one."""
        lookup = self._lookups.get(key)
        if lookup is None:
            lookup = asyncio.ensure_future(self._check(authorization))
            self._lookups[key] = lookup
            lookup.add_done_callback(lambda done: self._keep(key, done))
        return lookup

    def _keep(self, key: bytes, done: asyncio.Future) -> None:
        self._lookups.pop(key, None)
        if done.cancelled():
            return
        error = done.exception()
        if error is None:
            self._apps[key] = (done.result(), time.monotonic())
        elif isinstance(error, RouterError) and error.status in (401, 403):
            self._apps.pop(key, None)  # revoked: refused from now on
            self._refused[key] = error

    async def _check(self, authorization: str) -> App:
        try:
            async with asyncio.timeout(self._timeout_s), self._lookup_slots:  # a flood waits no longer
                response = await self._http.get("/v1/whoami", headers={"Authorization": authorization})
        except TimeoutError:
            raise _registry_unavailable("did not answer in time") from None
        except httpx.HTTPError as error:
            raise _registry_unavailable(f"is unreachable ({type(error).__name__})") from error
        if response.status_code == 401:
            raise RouterError(401, "invalid_api_key", "invalid or revoked API key",
                              "Ask your tenant's admin for an app key (loraplane token create --role app).")
        if response.status_code != 200:
            raise _registry_unavailable(f"answered {response.status_code}")
        who = response.json()
        if who.get("role") != "app" or not who.get("tenant"):
            raise RouterError(403, "not_an_app_key", f"a {who.get('role')} token cannot call the router",
                              "Use an app key of your tenant (loraplane token create --role app --tenant T).")
        return App(subject=who["subject"], tenant=who["tenant"], tier=who.get("tier") or TIERS[0])

    async def close(self) -> None:
        await self._http.aclose()


def _registry_unavailable(why: str) -> RouterError:
    return RouterError(503, "registry_unavailable", f"cannot check the API key: the registry {why}",
                       "Retry shortly.", retry_after_s=1)
