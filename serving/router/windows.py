"""What each served name and alias saw since the last traffic report: requests, errors by
class, completion tokens, and TTFT and latency as histogram bucket counts. The registry sums these
deltas over a canary's analysis window, for the canary and for production alike.

A report the registry did not take is not lost: it is sent again, unchanged and under the same
id, so a report whose answer was lost is counted once. A report holds at most
MAX_WINDOWS_PER_REPORT served names and aliases, the registry's bound: the rest wait for the next
one, oldest first, so a burst of names (or the traffic of a long outage) never makes a report the
registry must refuse."""

from __future__ import annotations

import uuid
from bisect import bisect_left
from dataclasses import dataclass, field

from serving.router.metrics import LATENCY_BUCKETS

# What went wrong, as the analysis counts it: a node's own 5xx answer, a timeout, no node able to
# answer, or an answer that broke off. A 4xx from a node is the client's mistake, not the version's.
ERROR_CLASSES = ("server_error", "timeout", "unavailable", "broken")
MAX_WINDOWS_PER_REPORT = 512  # registry/traffic_windows/schemas.py MAX_WINDOWS


def error_class(status: int) -> str | None:
    if status == 504:
        return "timeout"
    if status in (502, 503):
        return "unavailable"
    return "server_error" if status >= 500 else None


@dataclass
class Window:
    requests: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    completion_tokens: int = 0
    busy_s: float = 0.0  # the answered requests' latencies, summed: tokens/s per request
    ttft_buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    latency_buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    shadow_compared: int = 0
    shadow_agreed: int = 0
    cold_requests: int = 0  # of the answered: sent to a node that loaded the adapter on demand
    cold_ttft_buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))


class WindowMeter:
    def __init__(self) -> None:
        self._open: dict[tuple[str, str], Window] = {}
        self._pending: tuple[str, list[dict]] | None = None

    def answered(self, served_name: str, alias: str, status: int, ttft_s: float, latency_s: float,
                 completion_tokens: int, *, cold: bool = False) -> None:
        window = self._window(served_name, alias)
        window.requests += 1
        if (kind := error_class(status)) is not None:
            window.errors[kind] = window.errors.get(kind, 0) + 1
            return
        window.completion_tokens += completion_tokens
        window.busy_s += latency_s
        window.ttft_buckets[_bucket(ttft_s)] += 1
        window.latency_buckets[_bucket(latency_s)] += 1
        if cold:
            window.cold_requests += 1
            window.cold_ttft_buckets[_bucket(ttft_s)] += 1

    def failed(self, served_name: str, alias: str, status: int) -> None:
        """A request the router could not get answered (or whose answer broke off)."""
        window = self._window(served_name, alias)
        window.requests += 1
        kind = error_class(status) or "broken"
        window.errors[kind] = window.errors.get(kind, 0) + 1

    def shadowed(self, served_name: str, alias: str, agreed: bool) -> None:
        window = self._window(served_name, alias)
        window.shadow_compared += 1
        window.shadow_agreed += agreed

    def take(self) -> tuple[str, list[dict]] | None:
        """(report id, deltas) to send, or None when nothing happened. Until `acknowledged`, the
        same report is given again: the registry counts a report id once, so a report whose answer
        was lost is sent again unchanged, and what happens meanwhile waits for the next one."""
        if self._pending is None:
            if not self._open:
                return None
            # Oldest first: a dict keeps the order its windows opened in, and what is left over
            # stays ahead of what opens later.
            names = list(self._open)
            taken = {name: self._open.pop(name) for name in names[:MAX_WINDOWS_PER_REPORT]}
            self._pending = (str(uuid.uuid4()), [
                {"served_name": name, "alias": alias, "requests": w.requests, "errors": w.errors,
                 "completion_tokens": w.completion_tokens, "busy_s": round(w.busy_s, 6),
                 "ttft_buckets": w.ttft_buckets, "latency_buckets": w.latency_buckets,
                 "shadow_compared": w.shadow_compared, "shadow_agreed": w.shadow_agreed,
                 "cold_requests": w.cold_requests, "cold_ttft_buckets": w.cold_ttft_buckets}
                for (name, alias), w in sorted(taken.items())])
        return self._pending

    def acknowledged(self) -> None:
        """The registry took the pending report, or refused it for good (it would refuse it
        again): the next `take` makes a new one."""
        self._pending = None

    def _window(self, served_name: str, alias: str) -> Window:
        return self._open.setdefault((served_name, alias), Window())


def _bucket(seconds: float) -> int:
    """The index of the first bucket bound at or above `seconds` (the last: above them all)."""
    return bisect_left(LATENCY_BUCKETS, seconds)
