"""Each registry process's view of pool generations, for long-polls.

Three sources keep it current: this process's own commits (at once), Postgres LISTEN/NOTIFY for
commits in other processes (at once), and a poll of every pool's generation, which also covers
SQLite and any notification lost while the listener reconnects. Waiters sleep on one event per
pool, so a change wakes a thousand long-polls with one `set()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable

from sqlalchemy import URL, make_url

from registry.active_set import repository
from registry.active_set.writing.announcements import CHANNEL
from registry.db import get_engine, plain_transaction
from registry.settings import get_settings

log = logging.getLogger(__name__)


class GenerationWatch:
    def __init__(self) -> None:
        self._generations: dict[str, int] = {}
        self._changed: dict[str, asyncio.Event] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task] = []
        self.on_token_revoked: list[Callable[[], None]] = []
        self.revocations = 0  # revocations heard of (or possibly missed); long-polls compare it
        self.closing = False  # the process is stopping: long-polls answer at once

    # --- lifecycle -----------------------------------------------------------------------------

    async def start(self, *, poll_s: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._tasks.append(asyncio.create_task(self._poll(poll_s)))
        url = listen_url()
        if url is not None:
            self._tasks.append(asyncio.create_task(self._listen(url)))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()

    def end_waits(self) -> None:
        """Answer every parked long-poll now, unchanged (304), and park no more: the process is
        stopping, and its server waits for every running request before it stops. The nodes
        ask again, of another replica or of this one restarted."""
        self.closing = True
        for event in self._changed.values():
            event.set()
        self._changed.clear()

    # --- reading -------------------------------------------------------------------------------

    def known(self, pool: str) -> int | None:
        return self._generations.get(pool)

    async def wait_beyond(self, pool: str, generation: int, timeout_s: float) -> int:
        """Return as soon as the pool's generation is not `generation`, or after timeout_s."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not self.closing and self._generations.get(pool) == generation:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            event = self._changed.setdefault(pool, asyncio.Event())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):  # no task of its own per waiter, as wait_for makes
                    await event.wait()
        return self._generations.get(pool, generation)

    # --- updates -------------------------------------------------------------------------------

    def observe(self, pool: str, generation: int) -> None:
        """Record a generation (in the event loop's thread); wakes the pool's waiters."""
        if generation <= self._generations.get(pool, -1):
            return
        self._generations[pool] = generation
        event = self._changed.pop(pool, None)
        if event is not None:
            event.set()

    def on_message(self, message: dict) -> None:
        if message.get("kind") == "generation":
            self.observe(str(message["pool"]), int(message["generation"]))
        elif message.get("kind") == "token_revoked":
            self.revocations += 1
            for callback in self.on_token_revoked:
                callback()

    def publish_local(self, message: dict) -> None:
        """From any thread: this process committed a change."""
        if self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop is shutting down
                self._loop.call_soon_threadsafe(self.on_message, message)

    async def _poll(self, every_s: float) -> None:
        while True:
            try:
                for name, generation in await asyncio.to_thread(_all_generations):
                    self.observe(name, generation)
            except Exception as error:  # the database is away; keep serving what we know
                log.warning("could not read pool generations: %s", type(error).__name__)
            await asyncio.sleep(every_s)

    async def _listen(self, url) -> None:
        import psycopg  # here, not at the top: only a Postgres-backed registry needs it

        dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        delay = 0.5
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                    await repository.listen(conn, CHANNEL)
                    delay = 0.5
                    self.on_message({"kind": "token_revoked"})  # any revocation we may have missed
                    for name, generation in await asyncio.to_thread(_all_generations):
                        self.observe(name, generation)  # whatever changed while we were away
                    async for note in conn.notifies():
                        with contextlib.suppress(ValueError, KeyError, TypeError):
                            self.on_message(json.loads(note.payload))
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning("LISTEN connection lost (%s); polling covers the gap",
                            type(error).__name__)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10)


def listen_url() -> URL | None:
    """Where to LISTEN: LORAPLANE_DATABASE_LISTEN_URL, else the database's own URL, unless that
    goes through PgBouncer in transaction mode, which hands a LISTEN's server connection to other
    clients between transactions: then None, and long-polls wake at the poll's next re-read."""
    settings = get_settings()
    if settings.database_listen_url is not None:
        return make_url(settings.database_listen_url)
    url = get_engine().url
    if url.get_backend_name() != "postgresql":
        return None
    if settings.database_pgbouncer:
        log.warning("LORAPLANE_DATABASE_URL goes through PgBouncer (LORAPLANE_DATABASE_PGBOUNCER) "
                    "and LORAPLANE_DATABASE_LISTEN_URL is unset: a change committed on another "
                    "registry wakes this one's long-polls only at its next re-read, every %.1f s. "
                    "Set LORAPLANE_DATABASE_LISTEN_URL to a direct PostgreSQL URL to wake them at once.",
                    settings.active_set_poll_s)
        return None
    return url


def _all_generations() -> list[tuple[str, int]]:
    with plain_transaction() as session:
        return repository.all_generations(session)

