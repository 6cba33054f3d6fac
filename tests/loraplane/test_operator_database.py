"""`loraplane token ...` writes to the database directly: where there is none, or where
`loraplane up`'s ./.loraplane is not the one it would use, it refuses and says which setting to
give, creating nothing; where it writes, it says where."""

from __future__ import annotations

import os
import subprocess

from migrations import runner
from tests.support.cli import LORAPLANE


def run(*args: str, cwd, home, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LORAPLANE_")}
    return subprocess.run([LORAPLANE, *args], capture_output=True, text=True, cwd=cwd, timeout=120,
                          env={**clean, "HOME": str(home), "COLUMNS": "300", **env})


def said(result: subprocess.CompletedProcess) -> str:
    return " ".join((result.stdout + result.stderr).split())


def test_a_token_without_a_data_folder_is_refused_and_no_database_is_made(tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir(parents=True)

    refused = run("token", "create", "--subject", "alice", "--role", "uploader", "--tenant", "acme",
                  cwd=work, home=home)

    assert refused.returncode == 1
    assert f"error: there is no loraplane database at {home}/.loraplane/loraplane.db" in said(refused)
    assert "Set LORAPLANE_DATA_DIR to the registry's data folder (`loraplane up` uses ./.loraplane)" in said(refused)
    assert not (home / ".loraplane").exists()


def test_a_token_beside_up_state_it_would_not_use_is_refused_naming_the_setting(tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    for data in (home / ".loraplane", work / ".loraplane"):
        data.mkdir(parents=True)
        runner.upgrade(f"sqlite:///{data / 'loraplane.db'}")

    refused = run("token", "create", "--subject", "alice", "--role", "uploader", "--tenant", "acme",
                  cwd=work, home=home)

    assert refused.returncode == 1
    assert (f"this command would use the database at {home}/.loraplane/loraplane.db, but "
            f"{work}/.loraplane (where `loraplane up` keeps its state) holds one too") in said(refused)
    assert "Say which: LORAPLANE_DATA_DIR=.loraplane" in said(refused)

    made = run("token", "create", "--subject", "alice", "--role", "uploader", "--tenant", "acme",
               cwd=work, home=home, LORAPLANE_DATA_DIR=".loraplane")

    assert made.returncode == 0, made.stderr
    assert made.stdout.strip().startswith("lpt_")
    assert "made the uploader token of alice in sqlite:///.loraplane/loraplane.db" in made.stderr
