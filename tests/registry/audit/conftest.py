"""A database of its own for tests that break its chain on purpose."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devkit import services
from migrations import runner
from tests.registry.audit.tools import ChainDatabase, head_file_setting, record_events



@pytest.fixture
def tampered_database(postgres, tmp_path) -> Iterator[ChainDatabase]:
    """Six events in a database of their own, written by this process as the registry would,
    with the head kept in this test's own file."""
    url = services.create_database(postgres.url, "audit_tamper")
    runner.upgrade(url)
    with head_file_setting(tmp_path / "audit-head.json"):
        record_events(url, [f"thing/{i}" for i in range(6)])
        yield ChainDatabase(url, tmp_path / "audit-head.json")
