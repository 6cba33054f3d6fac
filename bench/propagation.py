"""Active-set propagation: how fast a promotion reaches 1,000 long-polling nodes, and what the
304 path costs against a bare Starlette endpoint.

    ./dev bench propagation [--nodes 1000 --rounds 5]

One registry process (`loraplane serve`, access log off) on real Postgres and S3. The nodes are
aiohttp long-polls in this process, each on its own connection, on the same 2 cores. Each round
requests a promotion and approves it through the registry's own service from this process, the
way a second registry process would; the clock starts just before that transaction commits and
stops when a node has read the new generation's body. The 304 path is measured in alternating
turns against a bare Starlette app under the same uvicorn settings.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import httpx
from sqlalchemy.orm import Session

from bench import report
from devkit import services
from devkit.pipeline_steps import (
    create_suite, evaluations_of, finish_evaluation, request_promotion, upload_dir,
)
from devkit.tiny_model import build_adapter, build_base_model
from registry.auth import tokens
from registry.auth.principal import Role
from registry.db import make_engine
from registry.promotions import service as promotions
from registry.tokens import issuing
from devkit.units_of_work import unit_of_work
from registry.unit_of_work import UnitOfWork

BUCKET, BASE, POOL = "bench", "bench-base", "fleet"


class Fleet:
    """N nodes, each long-polling on its own connection and recording when it read each
    generation."""

    def __init__(self, url: str, token: str, nodes: int) -> None:
        self.url, self.token, self.nodes = f"{url}/v1/pools/{POOL}/active-set", token, nodes
        self.seen: list[dict[int, float]] = [{} for _ in range(nodes)]
        self.parked = 0

    async def run(self, stop: asyncio.Event) -> None:
        connector = aiohttp.TCPConnector(limit=0, force_close=False)
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            tasks = [asyncio.create_task(self._node(session, i)) for i in range(self.nodes)]
            await stop.wait()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _node(self, session: aiohttp.ClientSession, index: int) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        etag = None
        while True:
            if etag:
                headers["If-None-Match"] = etag
            self.parked += 1
            try:
                async with session.get(self.url, params={"wait": "60"}, headers=headers) as response:
                    if response.status == 200:
                        await response.json()  # a node reads the whole set
                        etag = response.headers["ETag"]
                        self.seen[index][int(etag.strip('"'))] = time.monotonic()
                    elif response.status != 304:
                        raise RuntimeError(f"node {index}: HTTP {response.status}")
            finally:
                self.parked -= 1

    def latencies(self, generation: int, since: float) -> list[float] | None:
        found = [seen.get(generation) for seen in self.seen]
        return None if None in found else [t - since for t in found]


def approve_and_time(engine, admin_token: str, promotion_id: int) -> float:
    """Approve through the registry's service, in a unit of work as a request does; returns the
    moment just before its commit (which seals, signs, commits and announces)."""
    work = UnitOfWork(Session(engine))
    try:
        approver = tokens.authenticate(work.session, admin_token)
        promotions.approve(work.session, approver, promotion_id, "benchmark")
        started = time.monotonic()
        work.commit()
    finally:
        work.close()
    return started


async def propagation(fleet: Fleet, engine, plain: dict, uploader: httpx.Client, versions: list[dict],
                      rounds: int) -> list[dict]:
    stop = asyncio.Event()
    running = asyncio.create_task(fleet.run(stop))
    results = []
    try:
        await _settle(fleet)
        for round_index in range(-1, rounds):  # round -1 warms both processes up, untimed
            version = versions[round_index % len(versions)]
            # The simulated fleet's garbage collection is not the registry's latency: collect here,
            # outside the timed part, and not during it.
            gc.collect()
            gc.disable()
            promotion = await asyncio.to_thread(lambda: request_promotion(uploader, POOL, version).json())
            committed = await asyncio.to_thread(approve_and_time, engine, plain["admin"], promotion["id"])
            generation = await asyncio.to_thread(lambda: httpx.get(
                f"{uploader.base_url}/v1/pools/{POOL}/active-set",
                headers={"Authorization": f"Bearer {plain['admin']}"}).json()["generation"])
            deadline = time.monotonic() + 30
            while (latencies := fleet.latencies(generation, committed)) is None:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"round {round_index}: not every node saw generation {generation}")
                await asyncio.sleep(0.01)
            gc.enable()
            latencies.sort()
            if round_index < 0:
                await _settle(fleet)
                continue
            results.append({"generation": generation, "p50_ms": _ms(_pct(latencies, 50)),
                            "p99_ms": _ms(_pct(latencies, 99)), "max_ms": _ms(latencies[-1]),
                            "samples": latencies})
            print(f"round {round_index + 1}: generation {generation} reached {fleet.nodes} nodes, "
                  f"p50 {results[-1]['p50_ms']} ms, p99 {results[-1]['p99_ms']} ms, "
                  f"max {results[-1]['max_ms']} ms", flush=True)
            await _settle(fleet)
    finally:
        stop.set()
        await running
    return results


async def _settle(fleet: Fleet) -> None:
    """Until every node is parked in a long-poll again."""
    deadline = time.monotonic() + 30
    while fleet.parked < fleet.nodes:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {fleet.parked} of {fleet.nodes} nodes are polling")
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)


async def conditional_gets(url: str, token: str, etag: str, seconds: float, concurrency: int) -> float:
    """Requests per second of If-None-Match GETs that answer 304."""
    headers = {"Authorization": f"Bearer {token}", "If-None-Match": etag}
    done = 0
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        deadline = time.monotonic() + seconds

        async def loop() -> None:
            nonlocal done
            while time.monotonic() < deadline:
                async with session.get(url, headers=headers) as response:
                    if response.status != 304:
                        raise RuntimeError(f"expected 304, got {response.status}")
                done += 1

        started = time.monotonic()
        await asyncio.gather(*(loop() for _ in range(concurrency)))
        return done / (time.monotonic() - started)


def start_bare(folder: Path) -> services.Service:
    folder.mkdir(parents=True, exist_ok=True)
    port, log = services.free_port(), folder / "bare.log"
    import subprocess

    process = subprocess.Popen([sys.executable, "-m", "uvicorn", "bench.bare_304:app", "--host", "127.0.0.1",
                                "--port", str(port), "--no-access-log"],
                               stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=Path(__file__).parents[1])
    url = f"http://127.0.0.1:{port}"
    service = services.Service(process, url, log)
    services.wait_until(lambda: httpx.get(url + "/v1/pools/x/active-set").status_code == 304,
                        timeout_s=30, what="bare Starlette", log=log)
    return service


def prepare(work: Path, registry: services.Service, engine) -> tuple[dict, list[dict], httpx.Client]:
    plain = {}
    with unit_of_work(engine) as session:
        for name, role, tenant in (("admin", Role.ADMIN, None), ("uploader", Role.UPLOADER, "acme")):
            _, plain[name] = issuing.create_token(session, subject=f"bench-{name}", role=role,
                                                  tenant=tenant, actor="bench")
    admin = httpx.Client(base_url=registry.url, headers={"Authorization": f"Bearer {plain['admin']}"},
                         timeout=60)
    uploader = httpx.Client(base_url=registry.url, timeout=60,
                            headers={"Authorization": f"Bearer {plain['uploader']}"})
    base_dir = build_base_model(work / "base")
    config = httpx.Response(200, content=(base_dir / "config.json").read_bytes()).json()
    admin.post("/v1/base-models", json={"name": BASE, "config": config}).raise_for_status()
    create_suite(admin, "bench-suite", BASE, [{"prompt": "1 2 =>", "reference": "one two"}],
                 {"exact_match": {"min": 0.5}, "parity": {"max_logprob_diff": 0.01}})
    admin.post("/v1/pools", json={"name": POOL, "base_model": BASE, "max_loras": 4, "max_cpu_loras": 16,
                                  "max_lora_rank": 16}).raise_for_status()
    with unit_of_work(engine) as session:
        # One token read by every simulated node: reads only, of the whole set (every node
        # holds everything here), which is what each node's own part would be.
        _, plain["node"] = issuing.create_token(session, subject="bench-nodes", role=Role.NODE,
                                                tenant=None, pool=POOL, instance_id="bench-nodes",
                                                actor="bench", vllm_url="http://127.0.0.1:9")
    versions = []
    for seed in (1, 2):
        folder = build_adapter(base_dir, work / f"adapter-{seed}", seed=seed, base_model_name=BASE)
        version = upload_dir(uploader, "acme/fleet-bot", folder)
        admin.post(f"/v1/adapters/acme/fleet-bot/versions/{version['number']}/evaluations",
                   json={"suite": "bench-suite"}).raise_for_status()
        for evaluation in evaluations_of(admin, version):
            finish_evaluation(engine, evaluation["id"])
        versions.append(version)
    admin.close()
    return plain, versions, uploader


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10, help="Timed rounds, after one warm-up.")
    parser.add_argument("--throughput-seconds", type=float, default=5.0)
    parser.add_argument("--throughput-turns", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=64, help="Connections for the 304 load.")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8 * args.nodes + 1024)), hard))

    work = Path(tempfile.mkdtemp(prefix="loraplane-bench-propagation-"))
    work.chmod(0o755)
    running: list[services.Service] = []
    try:
        database_url, s3_server = services.start_database_and_store(work, running, BUCKET)
        registry = services.start_registry(
            work / "registry", services.registry_env(database_url, s3_server, BUCKET), "--no-access-log")
        running.append(registry)
        bare = start_bare(work / "bare")
        running.append(bare)
        engine = make_engine(database_url)
        plain, versions, uploader = prepare(work, registry, engine)

        fleet = Fleet(registry.url, plain["node"], args.nodes)
        rounds = asyncio.run(propagation(fleet, engine, plain, uploader, versions, args.rounds))

        etag = httpx.get(f"{registry.url}/v1/pools/{POOL}/active-set",
                         headers={"Authorization": f"Bearer {plain['node']}"}).headers["ETag"]
        ours, routed, floor = [], [], []
        path = f"/v1/pools/{POOL}/active-set"
        for _ in range(args.throughput_turns):  # alternate, so drift hits all sides alike
            for results, url in ((ours, registry.url + path), (floor, bare.url + path),
                                 # An extra query parameter skips the fast path: the full route.
                                 (routed, registry.url + path + "?wait=0&via=route")):
                results.append(asyncio.run(conditional_gets(url, plain["node"], etag,
                                                            args.throughput_seconds, args.concurrency)))
            print(f"304s per second: registry {ours[-1]:.0f} (through the full route {routed[-1]:.0f}), "
                  f"bare Starlette {floor[-1]:.0f}", flush=True)
        uploader.close()
        engine.dispose()
    finally:
        for service in reversed(running):
            service.stop()

    samples = sorted(s for r in rounds for s in r["samples"])
    metrics = {
        "nodes": args.nodes,
        "propagation_p50_ms": _ms(_pct(samples, 50)),
        "propagation_p99_ms": _ms(_pct(samples, 99)),
        "propagation_max_ms": _ms(samples[-1]),
        "propagation_round_p99_ms_median": statistics.median(r["p99_ms"] for r in rounds),
        "not_modified_rps_median": round(statistics.median(ours)),
        "bare_not_modified_rps_median": round(statistics.median(floor)),
        "not_modified_ratio_vs_bare": round(statistics.median(ours) / statistics.median(floor), 3),
        "routed_not_modified_ratio_vs_bare": round(statistics.median(routed) / statistics.median(floor), 3),
    }
    params = {"rounds": args.rounds, "throughput_seconds": args.throughput_seconds,
              "throughput_turns": args.throughput_turns, "concurrency": args.concurrency,
              "registry": "one `loraplane serve` process, access log off, Postgres LISTEN/NOTIFY",
              "clients": "aiohttp in one process on the same machine",
              "per_round": [{k: v for k, v in r.items() if k != "samples"} for r in rounds],
              "not_modified_rps": [round(x) for x in ours], "routed_rps": [round(x) for x in routed],
              "bare_rps": [round(x) for x in floor]}
    report.write("propagation", metrics, params)


def _pct(sorted_values: list[float], percent: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(percent / 100 * len(sorted_values)) - 1))
    return sorted_values[index]


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


if __name__ == "__main__":
    main()
