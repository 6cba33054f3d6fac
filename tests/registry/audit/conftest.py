"""A database of its own for tests that break its chain on purpose."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest

from registry import migrate
from registry.settings import get_settings
from tests.registry.audit.tools import ChainDatabase, head_file_setting, record_events
from tests.support import services

# Every process of one deployment shares LORAPLANE_SECRET_KEY (docs/operations.md): the audit
# chain is keyed with it, so the registry processes, this process and the CLI must all hold it.
os.environ.setdefault("LORAPLANE_SECRET_KEY", secrets.token_urlsafe(32))
get_settings.cache_clear()


@pytest.fixture
def tampered_database(postgres, tmp_path) -> Iterator[ChainDatabase]:
    """Six events in a database of their own, written by this process as the registry would,
    with the head kept in this test's own file."""
    url = services.create_database(postgres.url, "audit_tamper")
    migrate.upgrade(url)
    with head_file_setting(tmp_path / "audit-head.json"):
        record_events(url, [f"thing/{i}" for i in range(6)])
        yield ChainDatabase(url, tmp_path / "audit-head.json")
