"""SLO tiers. At most `max_inflight` requests are forwarded at once, and at most
`batch_max_inflight` of them batch; the rest wait in line. A freed slot goes to the oldest
interactive request first, so interactive requests never queue behind batch ones, and the nodes'
own queues never fill with batch work that interactive requests would wait behind.

One tenant may hold at most `tenant_max_inflight` requests in the router at once, forwarded or
waiting; past that it gets a 429 at once, so that no tenant can fill the line for the others."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, deque
from collections.abc import AsyncIterator, Iterator

from serving.router.errors import RouterError

INTERACTIVE, BATCH = "interactive", "batch"


class Admission:
    def __init__(self, max_inflight: int, batch_max_inflight: int, queue_timeout_s: float,
                 tenant_max_inflight: int | None = None, retry_after_s: int = 1) -> None:
        self.max_inflight, self.batch_max = max_inflight, batch_max_inflight
        self.queue_timeout_s = queue_timeout_s
        self.tenant_max = tenant_max_inflight  # None: no cap
        self.retry_after_s = retry_after_s
        self.inflight = {INTERACTIVE: 0, BATCH: 0}
        self.waiting: dict[str, deque[asyncio.Future]] = {INTERACTIVE: deque(), BATCH: deque()}
        self.by_tenant: Counter[str] = Counter()

    @contextlib.contextmanager
    def tenant_share(self, tenant: str) -> Iterator[None]:
        """Count one request of `tenant` from now until it is answered, or refuse it."""
        if self.tenant_max is not None and self.by_tenant[tenant] >= self.tenant_max:
            raise RouterError(429, "tenant_busy", f"tenant {tenant} already has {self.tenant_max} "
                              "requests in flight here", "Wait for some to finish, or send fewer "
                              "at once (LORAPLANE_ROUTER_TENANT_MAX_INFLIGHT).", retry_after_s=self.retry_after_s)
        self.by_tenant[tenant] += 1
        try:
            yield
        finally:
            self.by_tenant[tenant] -= 1
            if not self.by_tenant[tenant]:
                del self.by_tenant[tenant]

    @contextlib.asynccontextmanager
    async def slot(self, tier: str) -> AsyncIterator[None]:
        await self._acquire(tier)
        try:
            yield
        finally:
            self.inflight[tier] -= 1
            self._wake()

    def _may_start(self, tier: str) -> bool:
        if sum(self.inflight.values()) >= self.max_inflight:
            return False
        return tier == INTERACTIVE or self.inflight[BATCH] < self.batch_max

    async def _acquire(self, tier: str) -> None:
        if not self.waiting[INTERACTIVE] and (tier == INTERACTIVE or not self.waiting[BATCH]) \
                and self._may_start(tier):
            self.inflight[tier] += 1
            return
        turn = asyncio.get_running_loop().create_future()
        self.waiting[tier].append(turn)
        try:
            async with asyncio.timeout(self.queue_timeout_s):  # unlike wait_for, never drops a cancellation
                await asyncio.shield(turn)
        except (TimeoutError, asyncio.CancelledError) as error:
            if turn.done() and not turn.cancelled():  # granted as we gave up: hand it on
                self.inflight[tier] -= 1
                self._wake()
            else:
                turn.cancel()
                self.waiting[tier].remove(turn)
            if isinstance(error, TimeoutError):
                raise RouterError(503, "overloaded", f"no {tier} slot freed within "
                                  f"{self.queue_timeout_s:g} s", "Retry later, or send fewer "
                                  "requests at once.", retry_after_s=self.retry_after_s) from None
            raise

    def _wake(self) -> None:
        for tier in (INTERACTIVE, BATCH):
            queue = self.waiting[tier]
            while queue and self._may_start(tier):
                turn = queue.popleft()
                if not turn.done():
                    self.inflight[tier] += 1
                    turn.set_result(None)
