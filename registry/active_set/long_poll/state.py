"""What one registry process keeps to answer its long-polls: the pools' generations it knows
(watch.py), tokens it checked (caches.PrincipalCache), bodies it rendered (caches.BodyCache), and
the batched token re-checks of woken polls (token_recheck.py).

The application creates it with itself (registry/app.py: `app.state.long_polls`) and its
lifespan starts and stops the watch; a stop signal answers the parked long-polls at once
(stop_signal.py). The endpoint and the fast path read it from the app. Each app has its own, so
a test's app starts from nothing."""

from __future__ import annotations

from typing import Any

from registry.active_set.long_poll.caches import BodyCache, PrincipalCache
from registry.active_set.long_poll.stop_signal import end_waits_on_stop
from registry.active_set.long_poll.token_recheck import TokenRecheck
from registry.active_set.long_poll.watch import GenerationWatch


class LongPolls:
    def __init__(self, *, auth_cache_s: float) -> None:
        self.watch = GenerationWatch()
        self.principals = PrincipalCache(auth_cache_s)
        self.bodies = BodyCache()
        self.rechecks = TokenRecheck()
        self.watch.on_token_revoked.append(self.principals.clear)

    async def start(self, *, poll_s: float) -> None:
        await self.watch.start(poll_s=poll_s)
        end_waits_on_stop(self.watch)

    async def stop(self) -> None:
        await self.watch.stop()

    def wake(self, message: dict[str, Any]) -> None:
        """This process committed a change (the unit of work's step 5): from any thread."""
        self.watch.publish_local(message)


def of(app: Any) -> LongPolls:
    return app.state.long_polls
