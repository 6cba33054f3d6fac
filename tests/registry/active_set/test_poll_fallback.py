"""Without Postgres notifications (the embedded default runs on SQLite), a long-poll still wakes:
each registry process re-reads pool generations every `active_set_poll_s` (1 s by default)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from devkit import services
from tests.conftest import REPO
from tests.support.cli import start_up
from tests.support.metrics import wait_for_long_polls
from tests.support.nodes import bound_address


def test_a_change_committed_by_another_process_wakes_a_long_poll_by_polling(tmp_path, tiny_base):
    data_dir = tmp_path / "state"
    server = start_up(data_dir, services.free_port())
    try:
        admin = httpx.Client(base_url=server.url, timeout=30, headers={
            "Authorization": f"Bearer {(data_dir / 'admin.token').read_text().strip()}"})
        config = json.loads((tiny_base / "config.json").read_text())
        assert admin.post("/v1/base-models", json={"name": "edge-base", "config": config}).status_code == 201
        assert admin.post("/v1/pools", json={"name": "edge", "base_model": "edge-base", "max_loras": 1,
                                             "max_cpu_loras": 1, "max_lora_rank": 8}).status_code == 201
        token = admin.post("/v1/tokens", json={"subject": "edge-node", "role": "node",
                                               "pool": "edge", "instance_id": "edge-node",
                                               "vllm_url": bound_address("edge-node")}).json()["token"]
        node = httpx.Client(base_url=server.url, timeout=30, headers={"Authorization": f"Bearer {token}"})
        etag = node.get("/v1/pools/edge/active-set").headers["etag"]

        with ThreadPoolExecutor(1) as executor:
            waiting = executor.submit(long_poll, node, etag)
            wait_for_long_polls(admin, "edge", 1)
            assert not waiting.done()
            committed = bump_generation(data_dir)
            response, returned = waiting.result(timeout=15)
        woke_after = returned - committed

        assert response.status_code == 200
        assert response.headers["etag"] == f'"{int(etag.strip(chr(34))) + 1}"'
        assert woke_after <= 1.5, woke_after  # one poll interval, plus a margin for a busy machine
    finally:
        server.stop()


def long_poll(node: httpx.Client, etag: str) -> tuple[httpx.Response, float]:
    response = node.get("/v1/pools/edge/active-set", params={"wait": 10}, headers={"If-None-Match": etag})
    return response, time.monotonic()


BUMP = """
import sys
from sqlalchemy import select
from sqlalchemy.orm import Session
from registry.active_set.writing.change import new_generation
from registry.db import make_engine
from registry.tables import Pool
from registry.unit_of_work import UnitOfWork

work = UnitOfWork(Session(make_engine(sys.argv[1])))
new_generation(work.session, work.session.scalar(select(Pool.id).where(Pool.name == "edge")))
work.commit()
"""


def bump_generation(data_dir) -> float:
    """A bare generation bump from another process on the registry host (it holds the host's
    keys, as a change must): it reaches the registry neither through the registry's own wake-up
    after its commits nor through NOTIFY, which SQLite does not have."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LORAPLANE_")}
    subprocess.run([sys.executable, "-c", BUMP, f"sqlite:///{data_dir / 'loraplane.db'}"], check=True,
                   env={**env, "LORAPLANE_DATA_DIR": str(data_dir)}, cwd=REPO, timeout=60)
    return time.monotonic()
