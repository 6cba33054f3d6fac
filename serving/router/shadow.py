"""Shadow requests: a share of a canary's requests is also sent to production, after the client
has its answer, and the two answers are compared. The agreement is reported beside the canary's
other metrics; it never changes what the client got. At most a few shadow requests run at once:
past that, a shadowed request is simply not compared."""

from __future__ import annotations

import asyncio
import json
import logging

from serving.router import metrics
from serving.router.catalog import Target
from serving.router.forward import Forwarder

log = logging.getLogger("loraplane.router")
MAX_IN_FLIGHT = 4


class Shadow:
    def __init__(self, forwarder: Forwarder, max_in_flight: int = MAX_IN_FLIGHT) -> None:
        self.forwarder, self.max_in_flight = forwarder, max_in_flight
        self._running: set[asyncio.Task] = set()

    def compare_later(self, target: Target, path: str, payload: dict, canary_answer: bytes) -> None:
        if len(self._running) >= self.max_in_flight:
            metrics.SHADOW.labels(target.served_name, "skipped").inc()
            return
        task = asyncio.create_task(self._compare(target, path, payload, canary_answer))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _compare(self, target: Target, path: str, payload: dict, canary_answer: bytes) -> None:
        if target.shadow_of is None:  # only a canary that shadows another is compared
            return
        data = json.dumps({**payload, "model": target.shadow_of}).encode()
        status, body = await self.forwarder.fetch(target.shadow_of, path, data)
        if status != 200:
            metrics.SHADOW.labels(target.served_name, "unanswered").inc()
            return
        agreed = answers(body) == answers(canary_answer)
        metrics.SHADOW.labels(target.served_name, "agreed" if agreed else "differed").inc()
        self.forwarder.windows.shadowed(target.served_name, target.alias, agreed)


def answers(body: bytes) -> list[str | None] | None:
    """The answer's texts, choice by choice (a completion's text, a chat message's content)."""
    try:
        choices = json.loads(body)["choices"]
        return [c.get("text") if "text" in c else (c.get("message") or {}).get("content") for c in choices]
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
