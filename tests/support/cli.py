"""Run the `loraplane` command and `loraplane up` as a user would, without the test's settings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from devkit import services

LORAPLANE = str(Path(sys.executable).parent / "loraplane")


def start_up(data_dir: Path, port: int) -> services.Service:
    log = data_dir.parent / f"up-{port}.log"
    process = subprocess.Popen([LORAPLANE, "up", "--registry-only", "--port", str(port), "--data-dir", str(data_dir)],
                               stdout=log.open("ab"), stderr=subprocess.STDOUT,
                               env={k: v for k, v in os.environ.items() if not k.startswith("LORAPLANE_")})
    server = services.Service(process, f"http://127.0.0.1:{port}", log)
    services.wait_until(lambda: httpx.get(server.url + "/healthz").status_code == 200, timeout_s=60,
                        what="loraplane up", log=log)
    return server


def cli(*args: str, token: str | None = None, url: str = "", data_dir: Path | None = None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LORAPLANE_")}
    env.update({"LORAPLANE_URL": url, "COLUMNS": "120"})
    if token:
        env["LORAPLANE_TOKEN"] = token
    if data_dir:
        env["LORAPLANE_DATA_DIR"] = str(data_dir)
    return subprocess.run([LORAPLANE, *args], capture_output=True, text=True, env=env, timeout=120)
