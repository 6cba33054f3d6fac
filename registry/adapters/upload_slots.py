"""How many uploads one registry process receives at once, in all and per tenant.

Each upload may spool and expand up to the upload limit on the disk beside the state (twice
that with fold_scaling, whose derived weights are held to the same limit), and holds a thread
while it is checked. A slot is taken once the first bytes of the body have arrived (a
client that sends only headers holds none) and before anything is spooled; an upload beyond the
limits is answered at once with 429 and Retry-After rather than queued.
"""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager
from functools import lru_cache

from registry.errors import LoraplaneError
from registry.settings import get_settings

RETRY_AFTER_S = 5


class TooManyUploads(LoraplaneError):
    status, code = 429, "too_many_uploads"
    headers = {"Retry-After": str(RETRY_AFTER_S)}


class UploadSlots:
    """Counted on the event loop only, so no lock is needed."""

    def __init__(self, total: int, per_tenant: int) -> None:
        self.total, self.per_tenant = total, per_tenant
        self.held: Counter[str] = Counter()

    @contextmanager
    def hold(self, tenant: str):
        if sum(self.held.values()) >= self.total:
            raise TooManyUploads(
                f"this registry is already receiving {self.total} uploads, its limit",
                hint=f"Retry in {RETRY_AFTER_S} seconds, or raise LORAPLANE_MAX_CONCURRENT_UPLOADS.")
        if self.held[tenant] >= self.per_tenant:
            raise TooManyUploads(
                f"tenant {tenant!r} is already uploading {self.per_tenant} adapters at once, its share",
                hint=f"Retry in {RETRY_AFTER_S} seconds, or raise "
                     "LORAPLANE_MAX_CONCURRENT_UPLOADS_PER_TENANT.")
        self.held[tenant] += 1
        try:
            yield
        finally:
            self.held[tenant] -= 1
            if not self.held[tenant]:
                del self.held[tenant]


@lru_cache
def upload_slots() -> UploadSlots:
    settings = get_settings()
    return UploadSlots(settings.max_concurrent_uploads, settings.max_concurrent_uploads_per_tenant)
