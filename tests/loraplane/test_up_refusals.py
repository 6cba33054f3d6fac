"""`loraplane up` and `loraplane demo` refuse what cannot work, say how to fix it, and leave
nothing behind."""

from __future__ import annotations

import fcntl
import json
import socket

from tests.support.cli import cli


def test_up_refuses_a_port_in_use_before_touching_the_data_folder(tmp_path):
    data_dir = tmp_path / "state"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = cli("up", "--port", str(port), "--data-dir", str(data_dir))
    assert result.returncode == 1
    assert f"error: port {port} on 127.0.0.1 is in use" in result.stderr
    assert "pass --port with a free port" in result.stderr
    assert sorted(p.name for p in data_dir.iterdir()) == ["up.lock"]  # no database, no token


def test_up_refuses_a_data_folder_another_up_is_using(tmp_path):
    data_dir = tmp_path / ("state-of-a-long-named-deployment-" * 3)  # longer than a line: never wrapped
    data_dir.mkdir()
    with (data_dir / "up.lock").open("a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running `loraplane up` holds it
        result = cli("up", "--data-dir", str(data_dir))
    assert result.returncode == 1
    assert f"error: another `loraplane up` is running on {data_dir}" in result.stderr
    assert "Ctrl-C in its shell" in result.stderr
    assert sorted(p.name for p in data_dir.iterdir()) == ["up.lock"]


def test_demo_without_a_running_up_says_to_start_one(tmp_path):
    result = cli("demo", "--data-dir", str(tmp_path))
    assert result.returncode == 1
    assert f"error: {tmp_path / 'demo.json'} does not exist" in result.stderr
    assert "./dev up" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_demo_says_when_the_stack_it_was_seeded_by_is_gone(tmp_path):
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    (tmp_path / "demo.json").write_text(json.dumps({
        "registry_url": f"http://127.0.0.1:{port}", "router_url": f"http://127.0.0.1:{port}",
        "kit_dir": str(tmp_path / "task-kit"), "tokens": {"uploader": "x", "reviewer": "y", "app": "z"}}))
    result = cli("demo", "--data-dir", str(tmp_path))
    assert result.returncode == 1
    assert f"error: the registry does not answer at http://127.0.0.1:{port}/healthz" in result.stderr
    assert "Is `loraplane up` still running?" in result.stderr
