"""Three registry replicas and two housekeepers on one database, through PgBouncer in transaction
mode, behave as one (docs/operations.md, "Several replicas"):

- started together after a secret rotation, they seal again and publish their keys once;
- a change committed on one wakes the long-polls parked on the others at once (LISTEN on the
  direct URL, LORAPLANE_DATABASE_LISTEN_URL);
- each webhook delivery reaches its receiver once, even when its task runs three times at once;
- the housekeepers' loops run on the leader alone, and a leader cut off or killed hands over.

One database of this module's own, so its secret rotation and counts are its alone."""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import psycopg
import pytest
from celery import Celery
from sqlalchemy import delete, func, select

from devkit import replicas, services
from devkit.pipeline_steps import create_suite, promoter
from devkit.services import wait_for
from devkit.tiny_model import build_adapter
from devkit.units_of_work import unit_of_work
from migrations import runner
from registry.auth.principal import Role
from registry.db import make_engine
from registry.deployment_keys import service as deployment_keys
from registry.leadership import repository as leadership_locks
from registry.leadership.service import start_up_turn
from registry.tables import AuditEvent, DeploymentKey, SecretCheckpoint
from registry.task_queue import DELIVER_WEBHOOK, HOUSEKEEPING_QUEUE
from registry.tokens import issuing
from tests.support.metrics import metric_at, wait_for_long_polls
from tests.support.nodes import bound_address

BUCKET, BASE, POOL = "replicas", "replicas-base", "replicas"
WAKE_LIMIT_S = 2.0  # well under the replicas' 5 s re-read: only a notification wakes them this soon
HAND_OVER_LIMIT_S = 15.0  # the housekeepers try to lead every 0.3 s; the rest is a loaded machine
PREVIOUS_SECRET = secrets.token_urlsafe(32)  # what the deployment ran with before this module's


@pytest.fixture(scope="module")
def database(postgres: services.Service) -> str:
    url = services.create_database(postgres.url, "replicas")
    runner.upgrade(url)
    return url


@pytest.fixture(scope="module")
def fleet_engine(database: str):
    engine = make_engine(database)
    yield engine
    engine.dispose()


@pytest.fixture(scope="module")
def plain(fleet_engine) -> dict[str, str]:
    plain = {}
    with unit_of_work(fleet_engine) as session:
        for name, role, tenant in (("admin", Role.ADMIN, None), ("uploader", Role.UPLOADER, "acme"),
                                   ("scraper", Role.METRICS, None)):
            _, plain[name] = issuing.create_token(session, subject=f"replicas-{name}", role=role,
                                                  tenant=tenant, actor="tests")
    return plain


@pytest.fixture(scope="module")
def env(service_dir: Path, postgres, database: str, s3, s3_client, redis) -> dict[str, str]:
    bouncer = services.start_pgbouncer(service_dir / "pgbouncer", postgres.url)
    s3_client.create_bucket(Bucket=BUCKET)
    yield {**replicas.behind_pgbouncer(bouncer, database),
           # A queue of its own: the suite's housekeepers must not take this database's deliveries.
           "LORAPLANE_BROKER_URL": redis.url.rsplit("/", 1)[0] + "/5",
           "LORAPLANE_STORAGE": "s3", "LORAPLANE_S3_ENDPOINT_URL": s3.url, "LORAPLANE_S3_BUCKET": BUCKET,
           "LORAPLANE_PREVIOUS_SECRET_KEYS": PREVIOUS_SECRET, "LORAPLANE_ACTIVE_SET_POLL_S": "5",
           "LORAPLANE_WEBHOOK_ALLOWED_NETWORKS": '["127.0.0.0/8"]', "LORAPLANE_LEADERSHIP_CHECK_S": "0.3",
           "LORAPLANE_CANARY_CHECK_S": "0.5"}
    bouncer.stop()


@pytest.fixture(scope="module")
def fleet(service_dir: Path, env: dict[str, str], plain) -> list[services.Service]:
    started = replicas.start_together(service_dir / "replicas", env, 3)
    yield started
    for replica in started:
        replica.stop()


@pytest.fixture(scope="module")
def housekeepers(service_dir: Path, env: dict[str, str], fleet) -> list[services.Service]:
    def start(index: int) -> services.Service:
        return services.start_housekeeper(service_dir / f"replicas-housekeeper-{index}", {
            **env, "LORAPLANE_METRICS_PORT": str(services.free_port()), "LORAPLANE_METRICS_HOST": "127.0.0.1"})

    with ThreadPoolExecutor(2) as pool:
        started = list(pool.map(start, range(2)))
    yield started
    for housekeeper in started:
        services.stop_group(housekeeper, sig=9)  # this module's own database: nothing to finish


def client(replica: services.Service, token: str) -> httpx.Client:
    return httpx.Client(base_url=replica.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


@pytest.fixture(scope="module")
def pool(fleet, plain, tiny_base: Path) -> str:
    with client(fleet[0], plain["admin"]) as admin:
        config = json.loads((tiny_base / "config.json").read_text())
        assert admin.post("/v1/base-models", json={"name": BASE, "config": config}).status_code == 201
        assert admin.post("/v1/pools", json={"name": POOL, "base_model": BASE, "max_loras": 2, "max_cpu_loras": 4,
                                             "max_lora_rank": 16}).status_code == 201
    return POOL


def test_replicas_started_together_seal_again_and_publish_once(fleet, fleet_engine):
    with fleet_engine.connect() as connection:
        actions = Counter(connection.scalars(select(AuditEvent.action).where(
            AuditEvent.action.in_(["deployment.secret.rotated", "deployment.keys.published"]))))
        checkpoints = connection.scalar(select(func.count()).select_from(SecretCheckpoint))
    assert actions == {"deployment.secret.rotated": 1, "deployment.keys.published": 1}
    assert checkpoints == 1
    for replica in fleet:
        assert replica.process.poll() is None and httpx.get(replica.url + "/healthz").status_code == 200


def test_first_starts_together_publish_the_keys_once(fleet, fleet_engine):
    """Each replica's start-up step, as registry/app.py runs it, from three threads at once on a
    deployment whose keys were never published: without their turns, two of three failed on the
    published row's key (no previous secret here, whose lock would have ordered them)."""
    with fleet_engine.begin() as connection:
        connection.execute(delete(DeploymentKey))
    published_before = _count(fleet_engine, "deployment.keys.published")
    barrier, failures = threading.Barrier(3), []

    def start_up() -> None:
        barrier.wait()
        try:
            with unit_of_work(fleet_engine) as session:
                start_up_turn(session)
                deployment_keys.publish(session, actor="registry (start)")
        except Exception as error:  # noqa: BLE001 - the assertion names it
            failures.append(error)

    threads = [threading.Thread(target=start_up) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert failures == []
    assert _count(fleet_engine, "deployment.keys.published") == published_before + 1


def _count(engine, action: str) -> int:
    with engine.connect() as connection:
        return connection.scalar(select(func.count()).where(AuditEvent.action == action)) or 0


class LongPoll(threading.Thread):
    def __init__(self, replica: services.Service, token: str, etag: str) -> None:
        super().__init__(daemon=True)
        self.replica, self.token, self.etag = replica, token, etag
        self.answer: httpx.Response | None = None
        self.returned_at = 0.0

    def run(self) -> None:
        with client(self.replica, self.token) as node:
            self.answer = node.get(f"/v1/pools/{POOL}/active-set", params={"wait": 30},
                                   headers={"If-None-Match": self.etag})
        self.returned_at = time.monotonic()


def test_a_change_on_one_replica_wakes_long_polls_on_the_others(fleet, plain, pool):
    with client(fleet[0], plain["admin"]) as admin:
        node_token = admin.post("/v1/tokens", json={
            "subject": "replica-poller", "role": "node", "pool": pool, "instance_id": "replica-poller",
            "vllm_url": bound_address("replica-poller")}).json()["token"]
        etag = admin.get(f"/v1/pools/{pool}/active-set").headers["etag"]
        polls = [LongPoll(replica, node_token, etag) for replica in fleet[1:] for _ in range(2)]
        for poll in polls:
            poll.start()
        for replica in fleet[1:]:
            with client(replica, plain["admin"]) as there:
                wait_for_long_polls(there, pool, 2)
        changed_at = time.monotonic()
        changed = admin.patch(f"/v1/pools/{pool}", json={"canary_min_routers": 3})
        assert changed.status_code == 200, changed.text
    for poll in polls:
        poll.join(timeout=30)
    generation = int(etag.strip('"'))
    for poll in polls:
        assert poll.answer is not None and poll.answer.status_code == 200
        assert poll.answer.json()["generation"] > generation
        assert poll.returned_at - changed_at < WAKE_LIMIT_S, (poll.replica.url, poll.returned_at - changed_at)


class SlowReceiver:
    """A webhook receiver that takes 0.5 s to answer: time for a second copy of a delivery's task
    to start while the first is sending it."""

    def __init__(self) -> None:
        self.deliveries: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                receiver.deliveries.append(self.headers["X-Loraplane-Delivery"])
                time.sleep(0.5)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_each_webhook_delivery_reaches_its_receiver_once(fleet, housekeepers, plain, pool, fleet_engine, env,
                                                         tiny_base, tmp_path):
    receiver = SlowReceiver()
    admin, uploader = client(fleet[1], plain["admin"]), client(fleet[2], plain["uploader"])
    hook = admin.post("/v1/webhooks", json={"url": receiver.url, "events": ["*"]})
    assert hook.status_code == 201, hook.text
    create_suite(admin, "replicas-suite", BASE, [{"prompt": "1 2 =>", "reference": "one two"}],
                 {"exact_match": {"min": 0.5}, "parity": {"max_logprob_diff": 0.01}})
    producer = Celery(broker=env["LORAPLANE_BROKER_URL"])
    promote = promoter(admin, uploader, fleet_engine, pool, "replicas-suite")
    deliveries_path = f"/v1/webhooks/{hook.json()['id']}/deliveries"
    copied: set[int] = set()
    for seed in (1, 2):
        promote("replicated", build_adapter(tiny_base, tmp_path / f"adapter-{seed}", seed=seed,
                                            base_model_name=BASE))
        # Each delivery's task twice more at once, as a broker's redelivery and the sweep would:
        # two housekeepers with four threads each run the copies beside the first.
        for delivery in admin.get(deliveries_path).json():
            if delivery["id"] not in copied:
                copied.add(delivery["id"])
                for _ in range(2):
                    producer.send_task(DELIVER_WEBHOOK, args=[delivery["id"]], queue=HOUSEKEEPING_QUEUE)

    def settled() -> bool:
        rows = admin.get(deliveries_path).json()
        return all(row["state"] == "delivered" for row in rows) and len(rows) == len(copied)

    wait_for(settled, timeout_s=60, what="every delivery delivered")
    # Every copy ran to its end: the first sent it, the others found it sent or being sent.
    wait_for(lambda: sum(_task_results(h.log) for h in housekeepers) >= 3 * len(copied), timeout_s=60,
             what="every copy of every delivery task to finish")
    rows = admin.get(deliveries_path).json()
    assert len(copied) >= 4  # requested, approved and activated at least, per promotion
    assert Counter(receiver.deliveries) == Counter({str(row["id"]): 1 for row in rows})
    assert {row["attempts"] for row in rows} == {1}
    # And the copies did run beside the first: one found it being sent.
    assert any("being sent by another housekeeper" in h.log.read_text() for h in housekeepers)
    receiver.server.shutdown()
    admin.close()
    uploader.close()


def _task_results(log: Path) -> int:
    return sum(1 for line in log.read_text().splitlines()
               if DELIVER_WEBHOOK in line and " succeeded in " in line)


def _leaders(housekeepers: list[services.Service], plain) -> list[int]:
    with httpx.Client(headers={"Authorization": f"Bearer {plain['scraper']}"}, timeout=10) as scraper:
        found = []
        for index, housekeeper in enumerate(housekeepers):
            if housekeeper.process.poll() is not None:
                continue
            url = f"http://127.0.0.1:{housekeeper.env['LORAPLANE_METRICS_PORT']}/metrics"
            if metric_at(scraper, url, "loraplane_housekeeper_leader") == 1:
                found.append(index)
        return found


def _canary_rounds(housekeeper: services.Service, plain) -> float:
    with httpx.Client(headers={"Authorization": f"Bearer {plain['scraper']}"}, timeout=10) as scraper:
        url = f"http://127.0.0.1:{housekeeper.env['LORAPLANE_METRICS_PORT']}/metrics"
        return metric_at(scraper, url, "loraplane_housekeeper_canary_rounds_total", outcome="ok")


def _lock_holder(database: str) -> int | None:
    """The server process holding the housekeepers' leadership lock, if any."""
    with psycopg.connect(database.replace("+psycopg", ""), autocommit=True) as connection:
        row = connection.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = 0 AND objid = %s",
            (leadership_locks.HOUSEKEEPING,)).fetchone()
    return row[0] if row else None


def test_the_scheduled_loops_run_on_the_leader_alone(housekeepers, plain):
    (leader,) = wait_for(lambda: _leaders(housekeepers, plain), timeout_s=20, what="a leader")
    follower = housekeepers[1 - leader]
    wait_for(lambda: _canary_rounds(housekeepers[leader], plain) >= 2, timeout_s=20,
             what="the leader's canary rounds")
    assert _canary_rounds(follower, plain) == 0
    assert _leaders(housekeepers, plain) == [leader]


def test_a_leader_cut_off_or_killed_hands_over(housekeepers, plain, database):
    (leader,) = wait_for(lambda: _leaders(housekeepers, plain), timeout_s=20, what="a leader")
    holder = wait_for(lambda: _lock_holder(database), timeout_s=10, what="the lock's holder")
    # Its connection cut (a database failover, a proxy restart): it steps down, and one leads again.
    with psycopg.connect(database.replace("+psycopg", ""), autocommit=True) as connection:
        assert connection.execute("SELECT pg_terminate_backend(%s)", (holder,)).fetchone() == (True,)
    wait_for(lambda: "lost the lead" in housekeepers[leader].log.read_text(), timeout_s=HAND_OVER_LIMIT_S,
             what="the leader to step down")
    wait_for(lambda: (_lock_holder(database) or holder) != holder and len(_leaders(housekeepers, plain)) == 1,
             timeout_s=HAND_OVER_LIMIT_S, what="a leader again")

    # The leader killed outright: the other leads within the hand-over bound, and its loops run.
    (leader,) = _leaders(housekeepers, plain)
    survivor = housekeepers[1 - leader]
    rounds = _canary_rounds(survivor, plain)
    killed_at = time.monotonic()
    services.stop_group(housekeepers[leader], sig=9)
    wait_for(lambda: _leaders(housekeepers, plain) == [1 - leader], timeout_s=HAND_OVER_LIMIT_S,
             what="the survivor to lead")
    handed_over_s = time.monotonic() - killed_at
    wait_for(lambda: _canary_rounds(survivor, plain) > rounds, timeout_s=HAND_OVER_LIMIT_S,
             what="the survivor's canary rounds")
    assert handed_over_s < HAND_OVER_LIMIT_S
