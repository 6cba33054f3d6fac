"""Asking the agent for an adapter: one JSON line out, one JSON line back, over the unix socket
the agent listens on. Plain Python (no vLLM), so that it can be tested on its own.

It never raises: vLLM turns a resolver's exception into a 500 and skips the resolvers after it.
Every failure (no agent, a slow one, a closed connection, an answer too long or not JSON) is
None and a log line, within the deadline. Many first requests for one name arriving together
share one question to the agent."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
from dataclasses import dataclass

LOGGER = "vllm.plugins.loraplane_resolver"  # under vLLM's own logger, so its handler shows it
DEFAULT_DEADLINE_S = 30.0
MAX_ANSWER_BYTES = 64 * 1024
MAX_PATH_CHARS = 4096
log = logging.getLogger(LOGGER)


@dataclass(frozen=True)
class Resolved:
    served_name: str
    path: str


class Asker:
    def __init__(self, socket_path: str, deadline_s: float = DEFAULT_DEADLINE_S) -> None:
        self.socket_path, self.deadline_s = socket_path, deadline_s
        self._flights: dict[str, asyncio.Future[Resolved | None]] = {}

    async def ask(self, base_model_name: str, lora_name: str) -> Resolved | None:
        """The agent's folder for `lora_name`, or None (not approved, not available now, or any
        failure to ask). Concurrent calls for one name share one question."""
        try:
            flight = self._flights.get(lora_name)
            if flight is None:
                flight = asyncio.ensure_future(self._ask(base_model_name, lora_name))
                self._flights[lora_name] = flight
                flight.add_done_callback(functools.partial(self._landed, lora_name))
            # Shielded: one caller giving up (its client went away) must not cancel the others'.
            return await asyncio.shield(flight)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - never raise into vLLM
            log.exception("asking the loraplane agent for %r failed", lora_name[:200])
            return None

    def _landed(self, name: str, flight: asyncio.Future) -> None:
        if self._flights.get(name) is flight:
            del self._flights[name]

    async def _ask(self, base_model_name: str, lora_name: str) -> Resolved | None:
        shown = lora_name[:200]
        try:
            async with asyncio.timeout(self.deadline_s):
                answer = await self._exchange({"lora_name": lora_name, "base_model_name": base_model_name})
        except TimeoutError:
            log.warning("the loraplane agent did not answer for %r within %.1f s", shown, self.deadline_s)
            return None
        except (OSError, ValueError, UnicodeDecodeError) as error:  # no agent, closed, too long, not JSON
            log.warning("could not ask the loraplane agent at %s for %r: %s: %s", self.socket_path,
                        shown, type(error).__name__, str(error)[:200])
            return None
        return _resolved(answer, lora_name)

    async def _exchange(self, question: dict[str, str]) -> object:
        reader, writer = await asyncio.open_unix_connection(self.socket_path, limit=MAX_ANSWER_BYTES)
        try:
            writer.write(json.dumps(question).encode() + b"\n")
            await writer.drain()
            line = await reader.readline()  # ValueError past the limit
            if not line.endswith(b"\n"):
                raise ValueError("the connection closed before a whole answer")
            return json.loads(line)
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass


def _resolved(answer: object, lora_name: str) -> Resolved | None:
    shown = lora_name[:200]
    if not isinstance(answer, dict):
        log.warning("the loraplane agent answered %r with something other than a JSON object", shown)
        return None
    kind = answer.get("answer")
    if kind != "resolved":
        reason = str(answer.get("reason", ""))[:300]
        log.info("the loraplane agent does not resolve %r (%s): %s", shown, str(kind)[:40], reason)
        return None
    path, served_name = answer.get("path"), answer.get("served_name")
    if served_name != lora_name or not isinstance(path, str) or not os.path.isabs(path) \
            or len(path) > MAX_PATH_CHARS or "\x00" in path:
        log.warning("the loraplane agent's answer for %r is malformed; not loading it", shown)
        return None
    return Resolved(served_name, path)
