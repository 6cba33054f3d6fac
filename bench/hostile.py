"""Hostile-input benchmark: the attack corpus against a registry capped at 3 GiB of address space.

Run: ./dev bench hostile    (or: python -m bench.hostile)

It starts PostgreSQL, an S3 server and a registry with the test suite's limits (8 MiB uploads,
16 archive entries), uploads one valid adapter as a baseline, then sends every attack of
bench/hostile_corpus's grid (archives, multipart bodies, JSON configs, safetensors headers)
one after another and records:
- attacks: distinct hostile inputs sent (distinct bodies);
- server_errors: answers of 500 or more, or no answer at all (must be 0);
- accepted: 2xx answers (must be 0: every input is invalid by construction);
- max_rss_growth_mb: the registry's peak RSS during the run minus its RSS before it, in MiB;
- stored_after_refusal: rows and S3 objects added by the run (must be 0);
- p99_refusal_ms, p50_refusal_ms, max_refusal_ms: time to each refusal, request sent to answer.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from bench import report
from bench.hostile_corpus import Attack, synthesize_adapter
from bench.hostile_corpus.grid import grid
from devkit import services
from registry.auth.principal import Role
from registry.db import make_engine
from registry.tables import Adapter, AdapterVersion
from registry.tokens import issuing as tokens
from devkit.units_of_work import unit_of_work

BUCKET = "bench-hostile"
MiB = 1024 * 1024
ADDRESS_SPACE_CAP = 3 * 1024 * MiB
MAX_UPLOAD_BYTES = 8 * MiB
MAX_ARCHIVE_FILES = 16
BASE_NAME = "hostile-base"
BASE = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_hidden_layers": 2, "vocab_size": 256}
UPLOAD = "/v1/adapters/bench/hostile/versions"


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise KeyError("VmHWM")


def current_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise KeyError("VmRSS")


def stored(engine, s3) -> int:
    with Session(engine) as session:
        rows = sum(session.scalar(select(func.count()).select_from(table)) for table in (Adapter, AdapterVersion))
    return rows + s3.list_objects_v2(Bucket=BUCKET).get("KeyCount", 0)


def send(client: httpx.Client, attack: Attack) -> tuple[int, float]:
    """(status, seconds); status 0 when no answer came back."""
    started = time.perf_counter()
    try:
        status = client.post(UPLOAD, content=attack.body, headers={"Content-Type": attack.content_type}
                             ).status_code
    except httpx.TransportError:
        status = 0
    return status, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="loraplane-bench-"))
    work.chmod(0o755)
    running: list[services.Service] = []
    try:
        database_url, s3_server = services.start_database_and_store(work, running, BUCKET)
        s3 = services.s3_client(s3_server.url)
        registry = services.start_registry(work / "registry", {
            **services.registry_env(database_url, s3_server, BUCKET),
            "LORAPLANE_MAX_UPLOAD_BYTES": str(MAX_UPLOAD_BYTES),
            "LORAPLANE_MAX_ARCHIVE_FILES": str(MAX_ARCHIVE_FILES)})
        running.append(registry)
        pid = registry.process.pid
        resource.prlimit(pid, resource.RLIMIT_AS, (ADDRESS_SPACE_CAP, ADDRESS_SPACE_CAP))
        engine = make_engine(database_url)
        with unit_of_work(engine) as session:
            _, token = tokens.create_token(session, subject="bench", role=Role.ADMIN, tenant=None,
                                           actor="bench")
            tokens.ensure_tenant(session, "bench")
        client = httpx.Client(base_url=registry.url, timeout=120, headers={"Authorization": f"Bearer {token}"})
        client.post("/v1/base-models", json={"name": BASE_NAME, "config": BASE}).raise_for_status()
        adapter = synthesize_adapter(BASE, BASE_NAME)
        baseline = client.post("/v1/adapters/bench/baseline/versions",
                               files=[("file", part) for part in adapter.files()])
        if baseline.status_code != 201:
            raise RuntimeError(f"the valid baseline was refused: {baseline.text}")

        attacks = grid(adapter, max_upload_bytes=MAX_UPLOAD_BYTES, max_files=MAX_ARCHIVE_FILES)
        stored_before = stored(engine, s3)
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # the peak restarts from now
        rss_before = current_rss(pid)
        statuses: Counter[int] = Counter()
        refusal_s, failures, raised_peak, slowest = [], [], [], []
        peak = peak_rss(pid)
        for attack in attacks:
            status, seconds = send(client, attack)
            statuses[status] += 1
            if 400 <= status < 500:
                refusal_s.append(seconds)
            else:
                failures.append(f"{attack.name}: {status}")
            slowest.append((seconds, attack.name))
            if peak_rss(pid) > peak:  # which attacks moved the peak, and by how much
                raised_peak.append(((peak_rss(pid) - peak) / MiB, attack.name))
                peak = peak_rss(pid)
        growth_mb = (peak_rss(pid) - rss_before) / MiB
        ready = client.get("/readyz").status_code
        stored_after = stored(engine, s3) - stored_before
        client.close()
        engine.dispose()
        for failure in failures:
            print("not refused:", failure)
        for step, name in sorted(raised_peak, reverse=True)[:5]:
            print(f"raised the peak RSS by {step:.1f} MiB: {name}")
        for seconds, name in sorted(slowest, reverse=True)[:5]:
            print(f"answered in {1000 * seconds:.0f} ms: {name}")

        ordered = sorted(refusal_s)
        report.write(
            "hostile",
            {
                "attacks": len({attack.digest for attack in attacks}),
                "server_errors": sum(n for status, n in statuses.items() if status == 0 or status >= 500),
                "accepted": sum(n for status, n in statuses.items() if 200 <= status < 300),
                "max_rss_growth_mb": round(growth_mb, 1),
                "stored_after_refusal": stored_after,
                "p99_refusal_ms": round(1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 1),
                "p50_refusal_ms": round(1000 * statistics.median(ordered), 1),
                "max_refusal_ms": round(1000 * ordered[-1], 1),
                "readyz_after": ready,
            },
            {"families": dict(sorted(Counter(a.name.split("/")[0] for a in attacks).items())),
             "statuses": {str(status): n for status, n in sorted(statuses.items())},
             "registry_address_space_cap_bytes": ADDRESS_SPACE_CAP,
             "max_upload_bytes": MAX_UPLOAD_BYTES, "max_archive_files": MAX_ARCHIVE_FILES,
             "largest_body_bytes": max(len(a.body) for a in attacks),
             "largest_peak_rss_steps_mb": {name: round(step, 1)
                                           for step, name in sorted(raised_peak, reverse=True)[:3]},
             "rss_unit": "MiB", "database": "postgresql", "s3_server": "moto_server"},
        )
    finally:
        for service in reversed(running):
            service.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
