"""The unix socket vLLM's resolver plugin asks on: one JSON line in (`{"lora_name": ...}`), one
JSON line out (on_demand.py's answer), then the connection closes. A socket file, not a port:
only processes that share its folder (the pod's containers) reach it, and it is made
readable and writable by its owner and group only.

Bounded before any parse: a question is one line of at most MAX_QUESTION_BYTES, read within
READ_S; anything else gets `bad_request`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import stat
from pathlib import Path
from typing import Any

from serving.agent import metrics
from serving.agent.on_demand import OnDemand

log = logging.getLogger(__name__)
MAX_QUESTION_BYTES = 4096
READ_S = 5
MODE = 0o660


class ResolverSocket:
    def __init__(self, path: Path, on_demand: OnDemand) -> None:
        self.path, self.on_demand = path, on_demand

    async def serve(self) -> None:
        """Listen until cancelled; the socket file is removed on the way out."""
        self._clear()
        server = await asyncio.start_unix_server(self._answer, path=str(self.path), limit=MAX_QUESTION_BYTES)
        try:
            os.chmod(self.path, MODE)
            log.info("answering vLLM's resolver on %s", self.path)
            async with server:
                await server.serve_forever()
        finally:
            with contextlib.suppress(OSError):
                self.path.unlink()

    def _clear(self) -> None:
        """A socket left by an earlier run is replaced; anything else there is not touched."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            mode = self.path.lstat().st_mode
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(mode):
            raise RuntimeError(f"{self.path} exists and is not a socket: move it, or set "
                               "LORAPLANE_AGENT_RESOLVER_SOCKET to another path")
        self.path.unlink()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            name = await _question(reader)
            answer = await self.on_demand.resolve(name) if name is not None else \
                _bad_request("one JSON object with a string lora_name, on one line of at most 4 KiB")
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
        except (ConnectionError, OSError):  # the plugin gave up (its deadline): nothing to tell
            pass
        except Exception:  # noqa: BLE001 - one connection's bug must not stop the server
            log.exception("answering the resolver failed")
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()


async def _question(reader: asyncio.StreamReader) -> str | None:
    """The name asked for, or None for anything but a well-formed question."""
    try:
        async with asyncio.timeout(READ_S):
            line = await reader.readline()  # ValueError past the limit
        question = json.loads(line)
    except (TimeoutError, ValueError, UnicodeDecodeError):
        return None
    name = question.get("lora_name") if isinstance(question, dict) else None
    return name if isinstance(name, str) and len(name) <= 256 else None


def _bad_request(reason: str) -> dict[str, Any]:
    metrics.RESOLVER_ANSWERS.labels("bad_request").inc()
    return {"answer": "bad_request", "reason": reason}
