"""A registry that scales out: three replicas on one Postgres behind PgBouncer (transaction mode),
long-polling nodes spread across them, two housekeepers; what a capacity model needs per replica.

    ./dev bench fleet [--nodes 1000,3000,10000 --rounds 5]

The replicas (`loraplane serve --no-access-log`) reach Postgres through PgBouncer and LISTEN on
a direct connection (LORAPLANE_DATABASE_LISTEN_URL). They start together after a secret rotation
(LORAPLANE_PREVIOUS_SECRET_KEYS), as a rollout starts them. The nodes are long-polls in this
process (bench/lean_nodes.py: a bare protocol each, so that a client library's own CPU is not
measured as the registries'), spread evenly over the replicas, on the same cores; what they cost
is reported beside the replicas' CPU. Each round approves a
promotion from this process through PgBouncer, as a fourth replica would: the clock starts just
before the commit and stops when a node has read the new generation's body (bench/propagation.py,
whose nodes and rounds this reuses). The promotion's webhook events go to a receiver here,
through the two housekeepers.

Per replica it measures what a capacity model needs: the database connections it holds (to
PgBouncer, and direct for LISTEN), CPU seconds per woken node (the replicas' CPU from just before
a round's commit until every node is parked again, over the nodes woken), and the bytes a node
reads per change.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import resource
import secrets
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import tempfile
from pathlib import Path

import httpx
import psutil
from sqlalchemy import func, select, text

from bench import report
from bench.lean_nodes import LeanFleet
from bench.propagation import POOL, _ms, _pct, _settle, approve_and_time, prepare
from devkit import replicas, services
from devkit.pipeline_steps import request_promotion
from registry.db import make_engine
from registry.settings import get_settings
from registry.tables import AuditEvent

BUCKET = "bench"
COUNT = 3
SIZE_NAMES = {1000: "1k", 3000: "3k", 10000: "10k"}


class Spread:
    """Nodes spread evenly over the replicas: one Fleet per replica, read as one."""

    def __init__(self, urls: list[str], token: str, nodes: int) -> None:
        self.parts = [LeanFleet(url, token, nodes // len(urls) + (index < nodes % len(urls)),
                                f"/v1/pools/{POOL}/active-set")
                      for index, url in enumerate(urls)]
        self.nodes = nodes

    @property
    def parked(self) -> int:
        return sum(part.parked for part in self.parts)

    async def run(self, stop: asyncio.Event) -> None:
        await asyncio.gather(*(part.run(stop) for part in self.parts))

    def latencies(self, generation: int, since: float) -> list[float] | None:
        found = [part.latencies(generation, since) for part in self.parts]
        return None if any(f is None for f in found) else [t for f in found for t in f or []]


class Receiver:
    """The webhook receiver: counts each delivery id it is sent."""

    def __init__(self) -> None:
        self.received: Counter[str] = Counter()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received[self.headers["X-Loraplane-Delivery"]] += 1
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


class Connections:
    """Samples each replica's open database connections (to PgBouncer, and direct to Postgres)
    and Postgres' client backends, keeping the peak of each."""

    def __init__(self, processes: list[psutil.Process], bouncer_port: int, postgres_port: int) -> None:
        self.processes, self.ports = processes, {"pgbouncer": bouncer_port, "direct": postgres_port}
        self.peak = [{"pgbouncer": 0, "direct": 0} for _ in processes]

    def sample(self) -> None:
        for index, process in enumerate(self.processes):
            remote = Counter(c.raddr.port for c in process.net_connections(kind="tcp")
                             if c.raddr and c.status == psutil.CONN_ESTABLISHED)
            for kind, port in self.ports.items():
                self.peak[index][kind] = max(self.peak[index][kind], remote[port])


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return round(ordered[len(ordered) // 2], 3)


def cpu_seconds(processes: list[psutil.Process]) -> float:
    return sum(sum(p.cpu_times()[:2]) for p in processes)


async def rounds_at(spread: Spread, engine, plain: dict, uploader: httpx.Client, versions: list[dict],
                    rounds: int, processes: list[psutil.Process], connections: Connections) -> list[dict]:
    stop = asyncio.Event()
    running = asyncio.create_task(spread.run(stop))
    results = []
    try:
        await _settle(spread)
        for round_index in range(-1, rounds):  # round -1 warms the replicas up, untimed
            version = versions[round_index % len(versions)]
            gc.collect()
            gc.disable()
            promotion = (await asyncio.to_thread(request_promotion, uploader, POOL, version)).json()
            cpu_before, simulator_before = cpu_seconds(processes), time.process_time()
            committed = await asyncio.to_thread(approve_and_time, engine, plain["admin"], promotion["id"])
            generation = await asyncio.to_thread(lambda: httpx.get(
                f"{uploader.base_url}/v1/pools/{POOL}/active-set",
                headers={"Authorization": f"Bearer {plain['admin']}"}).json()["generation"])
            deadline = time.monotonic() + 60
            while (latencies := spread.latencies(generation, committed)) is None:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"round {round_index}: not every node saw generation {generation}")
                await asyncio.sleep(0.01)
            gc.enable()
            await _settle(spread)  # the woken nodes' next long-polls are part of the wake's cost
            cpu = cpu_seconds(processes) - cpu_before
            simulator_cpu = time.process_time() - simulator_before
            connections.sample()
            rss_mb = max(p.memory_info().rss for p in processes) / 2**20
            if round_index < 0:
                continue
            latencies.sort()
            results.append({"generation": generation, "p50_ms": _ms(_pct(latencies, 50)),
                            "p99_ms": _ms(_pct(latencies, 99)), "max_ms": _ms(latencies[-1]),
                            "replica_cpu_s": round(cpu, 3), "simulator_cpu_s": round(simulator_cpu, 3),
                            "replica_rss_mb_max": round(rss_mb, 1),
                            "samples": latencies})
            print(f"{spread.nodes} nodes, round {round_index + 1}: p50 {results[-1]['p50_ms']} ms, "
                  f"p99 {results[-1]['p99_ms']} ms, replicas' CPU {cpu:.2f} s, the simulated nodes' "
                  f"{simulator_cpu:.2f} s", flush=True)
    finally:
        stop.set()
        await running
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="1000,3000,10000",
                        help="Fleet sizes, comma-separated; each is measured in turn.")
    parser.add_argument("--rounds", type=int, default=5, help="Timed rounds per size, after one warm-up.")
    args = parser.parse_args()
    sizes = [int(size) for size in args.nodes.split(",")]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 2 * max(sizes) + 1024)), hard))

    work = Path(tempfile.mkdtemp(prefix="loraplane-bench-fleet-"))
    work.chmod(0o755)
    running: list[services.Service] = []
    try:
        database_url, s3_server = services.start_database_and_store(work, running, BUCKET)
        postgres = running[0]
        redis = services.start_redis(work / "redis")
        running.append(redis)
        # This process approves too, as a fourth replica: its commits queue webhook deliveries for
        # the housekeepers on the same broker.
        os.environ["LORAPLANE_BROKER_URL"] = redis.url
        get_settings.cache_clear()
        bouncer = services.start_pgbouncer(work / "pgbouncer", postgres.url, pool_size=60)
        running.append(bouncer)
        env = {**services.registry_env(database_url, s3_server, BUCKET),
               **replicas.behind_pgbouncer(bouncer, database_url),
               "LORAPLANE_BROKER_URL": redis.url, "LORAPLANE_WEBHOOK_ALLOWED_NETWORKS": '["127.0.0.0/8"]',
               "LORAPLANE_PREVIOUS_SECRET_KEYS": secrets.token_urlsafe(32)}
        fleet = replicas.start_together(work / "replicas", env, COUNT, "--no-access-log")
        running.extend(fleet)
        housekeepers = [services.start_housekeeper(work / f"housekeeper-{index}", env) for index in range(2)]
        running.extend(housekeepers)
        engine = make_engine(env["LORAPLANE_DATABASE_URL"], pgbouncer=True)
        plain, versions, uploader = prepare(work, fleet[0], engine)
        receiver = Receiver()
        admin = httpx.Client(base_url=fleet[1].url, headers={"Authorization": f"Bearer {plain['admin']}"})
        admin.post("/v1/webhooks", json={"url": receiver.url, "events": ["*"]}).raise_for_status()

        processes = [psutil.Process(replica.process.pid) for replica in fleet]
        connections = Connections(processes, int(bouncer.url.rsplit(":", 1)[1]),
                                  int(postgres.url.rsplit(":", 1)[1]))
        by_size = {}
        for size in sizes:
            spread = Spread([replica.url for replica in fleet], plain["node"], size)
            by_size[size] = asyncio.run(rounds_at(spread, engine, plain, uploader, versions, args.rounds,
                                                  processes, connections))
        node_read = httpx.get(f"{fleet[2].url}/v1/pools/{POOL}/active-set",
                              headers={"Authorization": f"Bearer {plain['node']}"})
        change_bytes = len(node_read.content) + sum(len(k) + len(v) + 4 for k, v in node_read.headers.items())

        deliveries = services.wait_for(lambda: _all_delivered(admin), timeout_s=120, what="every delivery")
        with engine.connect() as connection:
            rotations = connection.scalar(select(func.count()).where(
                AuditEvent.action == "deployment.secret.rotated"))
            server_connections = connection.scalar(text(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"))
        leaders = _leaders(housekeepers)
        uploader.close()
        admin.close()
        engine.dispose()
    finally:
        for service in reversed(running):
            service.stop()

    metrics: dict[str, float | int] = {}
    for size, rounds in by_size.items():
        samples = sorted(s for r in rounds for s in r["samples"])
        name = SIZE_NAMES.get(size, str(size))
        metrics[f"propagation_p50_ms_{name}"] = _ms(_pct(samples, 50))
        metrics[f"propagation_p99_ms_{name}"] = _ms(_pct(samples, 99))
        metrics[f"replica_cpu_s_per_woken_node_{name}"] = round(
            sum(r["replica_cpu_s"] for r in rounds) / (len(rounds) * size), 6)
        metrics[f"replica_rss_mb_max_{name}"] = max(r["replica_rss_mb_max"] for r in rounds)
        metrics[f"simulated_nodes_cpu_s_per_change_{name}"] = _median([r["simulator_cpu_s"] for r in rounds])
    metrics.update({
        "singleton_runs_per_change": rotations or 0,
        "housekeeper_leaders": leaders,
        "webhook_deliveries_per_event": round(sum(receiver.received.values()) / max(1, len(deliveries)), 3),
        "webhook_events": len(deliveries),
        "db_connections_per_replica_pgbouncer_peak": max(p["pgbouncer"] for p in connections.peak),
        "db_connections_per_replica_direct_peak": max(p["direct"] for p in connections.peak),
        "postgres_client_backends_at_end": server_connections,
        "bytes_per_change_per_node": change_bytes,
    })
    params = {"replicas": COUNT, "nodes": sizes, "rounds": args.rounds, "housekeepers": 2,
              "registry": "`loraplane serve --no-access-log` x3, one worker each, through PgBouncer "
                          "(transaction mode), LISTEN on a direct connection",
              "clients": "bare asyncio protocols (bench/lean_nodes.py) in one process on the same "
                         "machine, nodes spread evenly; each reads and parses every body",
              "pool": {"LORAPLANE_DATABASE_POOL_SIZE": 10, "LORAPLANE_DATABASE_MAX_OVERFLOW": 20},
              "singleton_runs_per_change": "start-up re-seal records (deployment.secret.rotated) for "
                                           "one secret rotation, three replicas started together",
              "replica_cpu_s_per_woken_node": "the replicas' CPU, summed, from just before a round's "
                                              "commit until every node is parked again, over the nodes "
                                              "woken (each node is woken by the one replica it polls)",
              "connections_by_replica": connections.peak,
              "per_round": {str(size): [{k: v for k, v in r.items() if k != "samples"} for r in rounds]
                            for size, rounds in by_size.items()}}
    report.write("fleet", metrics, params)


def _all_delivered(admin: httpx.Client) -> list[dict] | None:
    hooks = admin.get("/v1/webhooks").json()
    rows = [row for hook in hooks for row in admin.get(f"/v1/webhooks/{hook['id']}/deliveries").json()]
    return rows if rows and all(row["state"] == "delivered" for row in rows) else None


def _leaders(housekeepers: list[services.Service]) -> int:
    """Housekeepers that lead, from their logs (the last word of each on leading)."""
    count = 0
    for housekeeper in housekeepers:
        lines = [line for line in housekeeper.log.read_text().splitlines()
                 if "this process leads now" in line or "lost the lead" in line]
        count += bool(lines) and "leads now" in lines[-1]
    return count


if __name__ == "__main__":
    main()
