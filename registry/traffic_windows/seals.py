"""Every traffic window is sealed as the registry stores it: a keyed hash, under a key derived
from LORAPLANE_SECRET_KEY that the database never sees, of the pool, the router, the report, the
name and alias, when it was stored, and every count (the cold ones too, where it has them). A
canary's analysis counts only windows whose seal holds, so that someone who can write to the
database cannot make up traffic (as two routers that agree, say) and move a canary: without the
key, they cannot seal what they write."""

from __future__ import annotations

import json
from datetime import UTC

from registry.clock import aware
from registry import keys
from registry.keys import Purpose
from registry.tables import TrafficWindow

FIELDS = ("pool_id", "router_id", "report_id", "served_name", "alias", "requests", "errors",
          "completion_tokens", "busy_s", "ttft_buckets", "latency_buckets", "shadow_compared",
          "shadow_agreed")


def seal(window: TrafficWindow) -> str:
    return keys.sign(Purpose.TRAFFIC_WINDOWS, _message(window))


def holds(window: TrafficWindow) -> bool:
    return window.seal is not None and keys.verifies_current(Purpose.TRAFFIC_WINDOWS, _message(window),
                                                             window.seal)


def sealed_before(window: TrafficWindow) -> bool:
    """Sealed under a previous LORAPLANE_SECRET_KEY: to seal again after a rotation."""
    secret = None if window.seal is None else keys.matching(Purpose.TRAFFIC_WINDOWS, _message(window), window.seal)
    return secret is not None and secret != keys.current_fingerprint()


def _message(window: TrafficWindow) -> bytes:
    at = aware(window.at).astimezone(UTC).isoformat(timespec="microseconds")
    fields = [at, *(getattr(window, name) for name in FIELDS)]
    if window.cold_requests is not None or window.cold_ttft_buckets is not None:
        # Windows stored before routers counted cold requests have neither, and keep their seals.
        fields += [window.cold_requests, window.cold_ttft_buckets]
    return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
