"""`loraplane db upgrade` and `loraplane serve` on a data folder that does not exist yet: they
create it, private to the user, or say which folder they cannot create and what to do."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
from pathlib import Path

import httpx
from alembic.script import ScriptDirectory

from devkit import services
from migrations import runner
from tests.support.cli import LORAPLANE, cli


def schema_revision(data_dir: Path) -> str:
    with sqlite3.connect(data_dir / "loraplane.db") as connection:
        return connection.execute("SELECT version_num FROM alembic_version").fetchone()[0]


def head_revision() -> str:
    return ScriptDirectory.from_config(runner.alembic_config("sqlite://")).get_current_head()


def assert_private_folder(folder: Path) -> None:
    assert folder.is_dir()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_db_upgrade_creates_a_missing_nested_data_folder(tmp_path):
    data_dir = tmp_path / "fresh" / "nested" / "state"

    result = cli("db", "upgrade", data_dir=data_dir)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "database at head"
    assert_private_folder(data_dir)
    assert schema_revision(data_dir) == head_revision()


def test_serve_creates_a_missing_nested_data_folder_and_its_schema(tmp_path):
    data_dir = tmp_path / "fresh" / "nested" / "state"
    port = services.free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LORAPLANE_")}
    log = tmp_path / "serve.log"
    process = subprocess.Popen(
        [LORAPLANE, "serve", "--host", "127.0.0.1", "--port", str(port)],
        stdout=log.open("wb"), stderr=subprocess.STDOUT,
        env={**env, "LORAPLANE_DATA_DIR": str(data_dir), "LORAPLANE_PUBLIC_URL": f"http://127.0.0.1:{port}"})
    server = services.Service(process, f"http://127.0.0.1:{port}", log)
    try:
        services.wait_until(lambda: httpx.get(server.url + "/readyz").status_code == 200,
                            timeout_s=60, what="loraplane serve", log=log)
        assert_private_folder(data_dir)
        assert schema_revision(data_dir) == head_revision()
        assert "could not read pool generations" not in log.read_text()  # its tables are there
    finally:
        server.stop()
    assert process.returncode is not None


def test_both_commands_say_which_folder_they_cannot_create_and_what_to_do(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    data_dir = blocker / "state"
    expected = f"error: cannot create the data folder {data_dir}: Not a directory"
    hint = f"hint: Create it (mkdir -p -m 700 {data_dir}) as the user that runs loraplane"

    for args in (("db", "upgrade"), ("serve", "--host", "127.0.0.1", "--port", str(services.free_port()))):
        result = cli(*args, data_dir=data_dir)
        assert result.returncode == 1, (args, result.stdout, result.stderr)
        stderr = " ".join(result.stderr.split())  # the console wraps long lines
        assert expected in stderr and hint in stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr
        assert blocker.read_text() == "not a folder"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]
