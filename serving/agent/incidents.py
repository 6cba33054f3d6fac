"""What the node found wrong with bytes it had verified before (a cached file replaced, say), kept
for an hour and sent in every report, so the rollout shows it while someone can still act."""

from __future__ import annotations

import time
from collections import deque
from datetime import UTC, datetime
from typing import Any

KEEP = 20
KEEP_S = 3600


class Incidents:
    def __init__(self, keep: int = KEEP, keep_s: float = KEEP_S) -> None:
        self.keep_s = keep_s
        self._recent: deque[tuple[float, dict[str, Any]]] = deque(maxlen=keep)

    def record(self, served_name: str, kind: str, reason: str) -> None:
        self._recent.append((time.monotonic(), {"served_name": served_name, "kind": kind,
                                                "reason": reason,
                                                "at": datetime.now(UTC).isoformat()}))

    def current(self) -> list[dict[str, Any]]:
        cutoff = time.monotonic() - self.keep_s
        while self._recent and self._recent[0][0] < cutoff:
            self._recent.popleft()
        return [dict(incident) for _, incident in self._recent]
