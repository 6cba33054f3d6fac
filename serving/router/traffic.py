"""Each served name's recent request rate, which the router reports to the registry so that its
placement gives busy adapters more nodes."""

from __future__ import annotations

import time
from collections import Counter


class TrafficMeter:
    """Requests counted as they come, turned into rates that forget with a half-life."""

    def __init__(self, half_life_s: float = 60.0) -> None:
        self.half_life_s = half_life_s
        self._counts: Counter[str] = Counter()
        self._rates: dict[str, float] = {}
        self._since = time.monotonic()

    def record(self, served_name: str) -> None:
        self._counts[served_name] += 1

    def rates(self) -> dict[str, float]:
        """Requests per second by served name, folding in what was counted since the last call."""
        now = time.monotonic()
        elapsed = max(now - self._since, 1e-3)
        keep = 0.5 ** (elapsed / self.half_life_s)
        for name in set(self._rates) | set(self._counts):
            rate = self._rates.get(name, 0.0) * keep + self._counts[name] / elapsed * (1 - keep)
            if rate >= 1e-4:
                self._rates[name] = rate
            else:
                self._rates.pop(name, None)
        self._counts.clear()
        self._since = now
        return {name: round(rate, 6) for name, rate in self._rates.items()}
