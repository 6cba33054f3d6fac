"""Prometheus scrapes with a metrics token of its own, and reads the fleet from the registry:
what waits for a worker, webhook deliveries, and nodes that stopped reporting."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
import os
import shutil
import subprocess

import httpx
from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from devkit import services
from devkit.pipeline_steps import create_suite, upload_dir
from devkit.services import wait_for
from registry.tables import ApiToken, Evaluation, NodeStatus
from tests.conftest import OTHER_POOL
from tests.support.asserts import assert_refused
from tests.support.evals import request_evaluation
from tests.support.metrics import metric

NODE_STATUS = {"generation": 0, "loaded": [], "vllm_url": "http://10.1.2.3:8000",
               "limits": {"max_loras": 2, "max_cpu_loras": 4, "max_lora_rank": 16}}


def test_the_queue_of_a_base_no_worker_serves_is_seen_waiting(admin, client_for, tiny_base, make_adapter,
                                                             engine, tmp_path):
    # A base of its own: no worker consumes its queue, so what is queued stays queued.
    config = json.loads((tiny_base / "config.json").read_text())
    assert admin.post("/v1/base-models", json={"name": "unserved-base", "config": config}).status_code == 201
    create_suite(admin, "unserved-suite", "unserved-base", [{"prompt": "1 =>", "reference": "one"}],
                 {"exact_match": {"min": 0.5}})
    folder = tmp_path / "adapter"
    shutil.copytree(make_adapter(seed=71), folder)
    adapter_config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**adapter_config,
                                                            "base_model_name_or_path": "unserved-base"}))
    version = upload_dir(client_for("acme_uploader"), "acme/unserved", folder)
    scraper = client_for("scraper")
    assert metric(scraper, "loraplane_evaluations", base_model="unserved-base") == 0

    evaluation = request_evaluation(client_for("acme_uploader"), version, "unserved-suite")
    try:
        assert metric(scraper, "loraplane_evaluations", base_model="unserved-base", state="queued") == 1
        assert metric(scraper, "loraplane_evaluations", base_model="unserved-base", state="running") == 0
        assert metric(scraper, "loraplane_evaluation_oldest_queued_seconds", base_model="unserved-base") > 0
    finally:  # it would wait forever, and count against acme's quota of waiting evaluations
        with engine.begin() as connection:
            connection.execute(delete(Evaluation).where(Evaluation.id == evaluation["id"]))


def test_a_node_that_stops_reporting_turns_stale_then_leaves(client_for, engine):
    scraper, node = client_for("scraper"), client_for("other_pool_node")
    reported = node.put(f"/v1/pools/{OTHER_POOL}/nodes/other-pool-node/status", json=NODE_STATUS)
    assert reported.status_code == 200, reported.text
    assert metric(scraper, "loraplane_nodes", pool=OTHER_POOL, state="fresh") == 1
    assert metric(scraper, "loraplane_nodes", pool=OTHER_POOL, state="stale") == 0
    # LORAPLANE_NODE_STALE_AFTER_S is 3 s in the suite's registry.
    wait_for(lambda: metric(scraper, "loraplane_nodes", pool=OTHER_POOL, state="stale") == 1,
             timeout_s=15, what="the silent node to turn stale")
    assert metric(scraper, "loraplane_nodes", pool=OTHER_POOL, state="fresh") == 0
    # Silent past LORAPLANE_NODE_GONE_AFTER_S (an hour): gone, no longer stale for ever.
    with engine.begin() as connection:
        connection.execute(update(NodeStatus).where(NodeStatus.node_id == "other-pool-node")
                           .values(reported_at=datetime.now(UTC) - timedelta(hours=2)))
    assert metric(scraper, "loraplane_nodes", pool=OTHER_POOL, state="stale") == 0
    assert metric(scraper, "loraplane_nodes", pool=OTHER_POOL, state="fresh") == 0


def test_the_scrape_holds_the_processs_own_metrics_and_every_delivery_state(client_for):
    text = client_for("scraper").get("/metrics").text
    assert "loraplane_http_requests_total" in text
    for state in ("pending", "delivered", "failed"):
        assert f'loraplane_webhook_deliveries{{state="{state}"}}' in text
    assert "loraplane_webhook_oldest_pending_seconds" in text


def test_a_metrics_token_is_global_and_only_a_global_admin_issues_it(admin, client_for, engine):
    def stored() -> int:
        with Session(engine) as session:
            return session.scalar(select(func.count()).select_from(ApiToken).where(ApiToken.role == "metrics"))

    before = stored()
    assert_refused(admin.post("/v1/tokens", json={"subject": "prometheus", "role": "metrics", "tenant": "acme"}),
                   422, "invalid_token_scope", "a metrics token has no tenant")
    assert_refused(client_for("acme_admin").post("/v1/tokens", json={"subject": "prometheus", "role": "metrics"}),
                   403, "forbidden", "only a global admin may create tokens without a tenant")
    assert stored() == before

    made = admin.post("/v1/tokens", json={"subject": "prometheus", "role": "metrics"})
    assert made.status_code == 201, made.text
    headers = {"Authorization": f"Bearer {made.json()['token']}"}
    assert httpx.get(str(admin.base_url) + "/metrics", headers=headers).status_code == 200
    assert_refused(httpx.get(str(admin.base_url) + "/v1/pools", headers=headers), 403, "forbidden",
                   "metrics tokens may only read /metrics")
    assert stored() == before + 1


def test_several_worker_processes_are_scraped_as_one(service_dir, registry, tokens):
    env = {key: value for key, value in registry.env.items() if key.startswith("LORAPLANE_")}
    env.pop("LORAPLANE_PUBLIC_URL", None)
    env.pop("LORAPLANE_DATA_DIR", None)
    server = services.start_registry(service_dir / "registry-workers", env, "--workers", "2")
    try:
        scraper = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {tokens['scraper']}"})
        before = metric(scraper, "loraplane_http_requests_total", route="/healthz")
        for _ in range(40):  # a new connection each: either process may take it
            assert httpx.get(server.url + "/healthz").status_code == 200
        # Whichever process answers the scrape counts every process's requests.
        for _ in range(4):
            assert metric(scraper, "loraplane_http_requests_total", route="/healthz") == before + 40
        assert (service_dir / "registry-workers" / "metrics").is_dir()
    finally:
        server.stop()


def test_serve_refuses_a_metrics_folder_that_holds_other_files(tmp_path):
    folder = tmp_path / "not-only-metrics"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    (folder / "counter_123.db").write_bytes(b"old")
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(folder), "LORAPLANE_DATA_DIR": str(tmp_path / "data")}
    refused = subprocess.run([str(services.VENV_BIN / "loraplane"), "serve", "--workers", "2", "--port", "1"],
                             env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1
    said = refused.stdout + refused.stderr
    assert f"PROMETHEUS_MULTIPROC_DIR {folder} holds files that are not metrics (notes.txt)" in said
    assert sorted(path.name for path in folder.iterdir()) == ["counter_123.db", "notes.txt"]
