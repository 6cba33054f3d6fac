"""The CLI against the embedded default started by `loraplane up`: SQLite and a local folder."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess

import httpx
import pytest

from devkit import services
from tests.support.cli import LORAPLANE, cli, start_up


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("embedded") / "state"
    port = services.free_port()
    server = start_up(data_dir, port)
    yield server, data_dir, port
    server.stop()


def test_up_bootstraps_one_admin_token_privately(embedded):
    server, data_dir, _ = embedded
    token_file = data_dir / "admin.token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    who = cli("whoami", token=token_file.read_text().strip(), url=server.url)
    assert who.returncode == 0, who.stderr
    assert json.loads(who.stdout) == {"subject": "bootstrap-admin", "role": "admin", "tenant": None,
                                     "pool": None, "instance_id": None, "tier": None,
                                     "identity_id": 1, "token_id": 1}


def test_push_with_progress_then_download_and_verify(embedded, tiny_base, make_adapter):
    server, data_dir, _ = embedded
    admin_token = (data_dir / "admin.token").read_text().strip()
    registered = cli("base-model", "register", "tiny-llama", "--config", str(tiny_base / "config.json"),
                     token=admin_token, url=server.url)
    assert registered.returncode == 0, registered.stderr
    made = cli("token", "create", "--subject", "alice", "--role", "uploader", "--tenant", "acme",
               data_dir=data_dir)
    assert made.returncode == 0, made.stderr
    alice = made.stdout.strip()
    assert alice.startswith("lpt_")

    folder = make_adapter(seed=71)
    pushed = cli("push", str(folder), "--adapter", "acme/cli-demo", token=alice, url=server.url)

    assert pushed.returncode == 0, pushed.stderr
    version = json.loads(pushed.stdout)
    assert version["served_name"] == "acme/cli-demo@1" and version["uploaded_by"] == "alice"
    assert "acme/cli-demo" in pushed.stderr and "kB" in pushed.stderr  # the progress bar
    assert "created acme/cli-demo@1" in pushed.stderr
    again = cli("push", str(folder), "--adapter", "acme/cli-demo", "-q", token=alice, url=server.url)
    assert "already uploaded as acme/cli-demo@1" in again.stderr

    headers = {"Authorization": f"Bearer {alice}"}
    link = httpx.get(server.url + "/v1/adapters/acme/cli-demo/versions/1/download", headers=headers).json()
    assert link["digest"] == version["digest"]
    for entry in link["files"]:
        fetched = httpx.get(entry["url"])
        assert fetched.status_code == 200
        assert fetched.content == (folder / entry["name"]).read_bytes()
        assert hashlib.sha256(fetched.content).hexdigest() == entry["sha256"]
    url = link["files"][1]["url"]
    flipped = "0" if url[-1] != "0" else "1"
    tampered = httpx.get(url[:-1] + flipped)
    assert tampered.status_code == 403
    assert tampered.json()["error"]["code"] == "bad_signature"


def test_cli_errors_say_what_and_how_to_fix(embedded, tmp_path):
    server, data_dir, _ = embedded
    admin_token = (data_dir / "admin.token").read_text().strip()
    missing = cli("push", str(tmp_path / "nowhere"), "--adapter", "acme/x", token=admin_token, url=server.url)
    assert missing.returncode == 1
    assert "does not exist" in missing.stderr
    (tmp_path / "adapter_config.json").write_text("{not json")
    (tmp_path / "adapter_model.safetensors").write_bytes(b"\0" * 16)
    refused = cli("push", str(tmp_path), "--adapter", "acme/x", token=admin_token, url=server.url)
    assert refused.returncode == 1
    assert "adapter_config.json: not valid JSON" in refused.stderr and "hint:" in refused.stderr
    bad_role = cli("token", "create", "--subject", "bob", "--role", "wizard", "--tenant", "acme",
                   data_dir=data_dir)
    assert bad_role.returncode == 1 and "unknown role 'wizard'" in bad_role.stderr


def test_suite_create_keeps_line_separators_inside_references(embedded, tiny_base, tmp_path):
    server, data_dir, _ = embedded
    admin_token = (data_dir / "admin.token").read_text().strip()
    registered = cli("base-model", "register", "separators-base", "--config",
                     str(tiny_base / "config.json"), token=admin_token, url=server.url)
    assert registered.returncode == 0, registered.stderr
    # Characters str.splitlines() breaks at: JSON writers leave U+0085, U+2028 and U+2029 raw.
    rows = [{"prompt": f"say {i}:", "reference": f"before{char}after"}
            for i, char in enumerate(["\x85", "\u2028", "\u2029", "\x0b", "\x0c", "\x1c", "\x1e"])]
    dataset = tmp_path / "separators.jsonl"
    dataset.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows),
                       encoding="utf-8")
    assert "\u2028" in dataset.read_text(encoding="utf-8")

    created = cli("suite", "create", "separators", "--base-model", "separators-base", "--dataset",
                  str(dataset), "--metrics", '{"exact_match": {"min": 0.5}}',
                  token=admin_token, url=server.url)

    assert created.returncode == 0, created.stderr
    suite = json.loads(created.stdout)
    assert suite["example_count"] == len(rows)
    digest = suite["dataset_sha256"]
    stored = (data_dir / "store" / "blobs" / "sha256" / digest[:2] / digest).read_bytes()
    assert [json.loads(line) for line in stored.decode().split("\n") if line] == rows


def test_restart_keeps_state_and_does_not_mint_another_admin(embedded):
    server, data_dir, port = embedded
    token = (data_dir / "admin.token").read_text()
    server.stop()
    restarted = start_up(data_dir, port)
    try:
        assert (data_dir / "admin.token").read_text() == token
        assert "created the first admin token" not in restarted.log.read_text().split("Started server")[-2]
        headers = {"Authorization": f"Bearer {token.strip()}"}
        versions = httpx.get(restarted.url + "/v1/adapters/acme/cli-demo/versions", headers=headers)
        assert [v["number"] for v in versions.json()["items"]] == [1]
    finally:
        restarted.stop()


def test_db_upgrade_and_check_commands(tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    env = {**os.environ, "LORAPLANE_DATABASE_URL": url}
    for args in (["db", "upgrade"], ["db", "check"], ["db", "downgrade", "base"]):
        result = subprocess.run([LORAPLANE, *args], capture_output=True, text=True, env=env, timeout=120)
        assert result.returncode == 0, result.stderr
    subprocess.run([LORAPLANE, "db", "upgrade"], env=env, check=True, capture_output=True)
    check = subprocess.run([LORAPLANE, "db", "check"], env=env, capture_output=True, text=True)
    assert check.returncode == 0 and "no drift" in check.stdout
