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


def test_a_folder_from_before_keyed_token_hashes_keeps_its_saved_tokens(tmp_path):
    """`loraplane up` holds its admin token and the demo's in the folder: it stores them keyed at
    its next start, and every other unkeyed token in the folder's database stays refused."""
    import hashlib
    import json
    import sys

    data_dir = tmp_path / "state"
    prepare = ("import sys; from pathlib import Path; from devkit.embedded import prepare_state; "
               "print(prepare_state(Path(sys.argv[1]), 'http://127.0.0.1:9'))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LORAPLANE_")}
    first = subprocess.run([sys.executable, "-c", prepare, str(data_dir)], env=env, capture_output=True,
                           text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    admin = (data_dir / "admin.token").read_text().strip()
    (data_dir / "demo.json").write_text(json.dumps({"tokens": {"stray": "lpt_not-a-stored-token"}}))
    with sqlite3.connect(data_dir / "loraplane.db") as connection:  # as a registry from before stored it
        connection.execute("UPDATE api_tokens SET token_hash = ?", (hashlib.sha256(admin.encode()).hexdigest(),))
        connection.execute("INSERT INTO api_tokens (token_hash, subject, identity_id, role, expires_at) "
                           "SELECT ?, 'planted', identity_id, role, expires_at FROM api_tokens LIMIT 1",
                           (hashlib.sha256(b"lpt_planted").hexdigest(),))

    again = subprocess.run([sys.executable, "-c", prepare, str(data_dir)], env=env, capture_output=True,
                           text=True, timeout=120)

    assert again.returncode == 0, again.stderr
    with sqlite3.connect(data_dir / "loraplane.db") as connection:
        hashes = [row[0] for row in connection.execute("SELECT token_hash FROM api_tokens ORDER BY id")]
    assert hashes[0] != hashlib.sha256(admin.encode()).hexdigest()  # the admin's, keyed
    assert hashes[1] == hashlib.sha256(b"lpt_planted").hexdigest()  # unknown here: left, and refused
