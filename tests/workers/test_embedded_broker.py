"""The embedded default needs no server: SQLite, a local artifact folder and a folder broker
carry an evaluation from `loraplane up` through `loraplane worker` to a real engine."""

from __future__ import annotations

import json
import os

import httpx

from devkit import services
from devkit.pipeline_steps import create_suite, upload_dir
from tests.loraplane.test_cli import cli, start_up
from tests.support.eval_stack import KIT_BASE, Worker
from tests.support.evals import wait_finished


def test_an_evaluation_runs_end_to_end_on_the_embedded_default(task_kit, eval_engine, tmp_path):
    data_dir = tmp_path / "state"
    server = start_up(data_dir, services.free_port())
    worker = None
    try:
        admin_token = (data_dir / "admin.token").read_text().strip()
        made = cli("token", "create", "--subject", "erin", "--role", "uploader", "--tenant", "acme",
                   data_dir=data_dir)
        assert made.returncode == 0, made.stderr
        admin = httpx.Client(base_url=server.url, timeout=60,  # a new base is derived in seconds
                             headers={"Authorization": f"Bearer {admin_token}"})
        uploader = httpx.Client(base_url=server.url, timeout=60,
                                         headers={"Authorization": f"Bearer {made.stdout.strip()}"})
        config = json.loads((task_kit.base_dir / "config.json").read_text())
        assert admin.post("/v1/base-models", json={"name": KIT_BASE, "config": config}).status_code == 201
        create_suite(admin, "digits-embedded", KIT_BASE, task_kit.suites["digits_to_words"][:8],
                     {"exact_match": {"min": 0.8}, "parity": {}})
        version = upload_dir(uploader, "acme/embedded", task_kit.adapters["digits_to_words"])
        requested = uploader.post("/v1/adapters/acme/embedded/versions/1/evaluations",
                                  json={"suite": "digits-embedded"})
        assert requested.status_code == 202, requested.text

        # Only the data folder is shared, as `loraplane up` shares it: no database, storage or
        # broker settings, and the secret and attestation keys are the data folder's (a worker
        # with others would refuse to start: registry/deployment_keys/).
        env = {"LORAPLANE_ENGINE_URL": eval_engine.url, "LORAPLANE_ENGINE_BASE_MODEL": KIT_BASE}
        assert not any(key in os.environ for key in ("LORAPLANE_BROKER_URL", "LORAPLANE_DATABASE_URL"))
        # Started after the request: the folder queue kept it.
        worker = Worker(data_dir, env, "embedded", inherit_settings=False)
        result = wait_finished(uploader, requested.json()["id"], timeout_s=120)
        assert result["state"] == "passed", result
        assert result["served_name"] == version["served_name"]
        assert (data_dir / "broker" / "queue").is_dir() and (data_dir / "eval-cache").is_dir()
    finally:
        if worker is not None:
            worker.stop()
        server.stop()
