"""The tools an attacker holding the database owner's credentials would use on the audit chain,
and `loraplane audit verify` run as an operator runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Connection, text

from registry import audit
from registry.db import make_engine
from registry.settings import get_settings
from devkit.units_of_work import unit_of_work

LORAPLANE = Path(sys.executable).parent / "loraplane"
TRIGGERS = ("audit_events_append_only", "audit_events_no_truncate")


@dataclass(frozen=True)
class ChainDatabase:
    url: str
    head_file: Path  # where this test's registry keeps the chain's head, outside the database


@contextmanager
def head_file_setting(path: Path) -> Iterator[None]:
    """Point this process (and the CLI it starts) at one head file, then put the setting back."""
    before = os.environ.get("LORAPLANE_AUDIT_HEAD_FILE")
    os.environ["LORAPLANE_AUDIT_HEAD_FILE"] = str(path)
    get_settings.cache_clear()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("LORAPLANE_AUDIT_HEAD_FILE")
        else:
            os.environ["LORAPLANE_AUDIT_HEAD_FILE"] = before
        get_settings.cache_clear()


def record_events(url: str, subjects: list[str]) -> None:
    engine = make_engine(url, pooled=False)
    for i, subject in enumerate(subjects):
        with unit_of_work(engine) as session:
            audit.record(session, actor="tests", action="demo.event", subject=subject, after={"i": i})
    engine.dispose()


def run_verify(url: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(LORAPLANE), "audit", "verify"], capture_output=True, text=True,
                          env={**os.environ, "LORAPLANE_DATABASE_URL": url, "COLUMNS": "400"},
                          timeout=60)


def said(result: subprocess.CompletedProcess) -> str:
    """The CLI's error output as one line: the console wraps long lines."""
    return " ".join(result.stderr.split())


@contextmanager
def as_owner_without_triggers(url: str) -> Iterator[Connection]:
    """What the table's owner can do: switch the append-only triggers off, change anything, and
    switch them back on, in one transaction nobody sees half of."""
    engine = make_engine(url, pooled=False)
    try:
        with engine.begin() as connection:
            connection.execute(text("ALTER TABLE audit_events DISABLE TRIGGER USER"))
            yield connection
            for trigger in TRIGGERS:
                connection.execute(text(f"ALTER TABLE audit_events ENABLE ALWAYS TRIGGER {trigger}"))
    finally:
        engine.dispose()


def tamper(url: str, statement: str) -> None:
    with as_owner_without_triggers(url) as connection:
        connection.execute(text(statement))
