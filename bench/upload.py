"""Upload benchmark: the registry against a raw boto3 upload of the same bytes to the same S3.

Run: ./dev bench upload    (or: python -m bench.upload --rounds 3)

It synthesizes a valid adapter of about 200 MB (rank 64 on q/k/v/o of a base as wide as a 70B
Llama: hidden 8192, 64 heads, 8 KV heads; 31 layers), then
runs, round by round, a raw boto3 upload and an upload through the registry, alternating which
goes first. The
registry's upload is `loraplane push`: the client's sha256, the HTTP transfer, validation,
hashing and the S3 upload, which streams while the request arrives.
- rss_growth_mb: the registry's peak RSS during the upload minus its RSS before it (worst round).
- throughput_ratio_vs_boto3: the median over rounds of (registry MB/s / boto3 MB/s), each pair
  measured back to back, so slow and fast spells of this shared machine cancel out. The ratio of
  the two medians is reported beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from bench import report
from devkit import services
from loraplane_client.push import push
from registry.adapters.part_pump import PARTS_IN_FLIGHT
from registry.auth.principal import Role
from registry.db import make_engine
from registry.storage.s3 import PART_SIZE
from registry.tokens import issuing as tokens
from devkit.units_of_work import unit_of_work

BUCKET = "bench"
MB = 1_000_000
BASE = {"architectures": ["LlamaForCausalLM"], "hidden_size": 8192, "intermediate_size": 28672,
        "num_attention_heads": 64, "num_key_value_heads": 8, "num_hidden_layers": 31,
        "vocab_size": 128256}
PROJECTIONS = {"q_proj": (8192, 8192), "k_proj": (8192, 1024), "v_proj": (8192, 1024),
               "o_proj": (8192, 8192)}


def synthesize_adapter(folder: Path, rank: int) -> Path:
    """Write a valid PEFT adapter: float16, finite, shapes that match BASE."""
    rng = np.random.default_rng(0)
    header, offset = {}, 0
    for layer in range(BASE["num_hidden_layers"]):
        for module, (fan_in, fan_out) in PROJECTIONS.items():
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            for side, shape in (("A", (rank, fan_in)), ("B", (fan_out, rank))):
                size = shape[0] * shape[1] * 2
                header[f"{prefix}.lora_{side}.weight"] = {
                    "dtype": "F16", "shape": list(shape), "data_offsets": [offset, offset + size]}
                offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    block = (rng.standard_normal(8 * MB // 2, dtype=np.float32) * 0.01).astype(np.float16).tobytes()
    with open(folder / "adapter_model.safetensors", "wb") as out:
        out.write(len(raw).to_bytes(8, "little") + raw)
        remaining = offset
        while remaining:
            chunk = block[: min(len(block), remaining)]
            out.write(chunk)
            remaining -= len(chunk)
    config = {"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank, "bias": "none",
              "target_modules": list(PROJECTIONS), "base_model_name_or_path": "bench-70b",
              "task_type": "CAUSAL_LM"}
    (folder / "adapter_config.json").write_text(json.dumps(config))
    return folder


def rss_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_of(*pids: int) -> list[float]:
    return [cpu_seconds(pid) for pid in pids]


def reset_peak_rss(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM to the current RSS


def delete_all(s3) -> None:
    for obj in s3.list_objects_v2(Bucket=BUCKET).get("Contents", []):
        s3.delete_object(Bucket=BUCKET, Key=obj["Key"])


def upload_via_registry(client: httpx.Client, folder: Path, adapter: str) -> float:
    """The `loraplane push` code path, including its local sha256 of the weights."""
    tenant, name = adapter.split("/")
    started = time.perf_counter()
    _, created = push(client, folder, tenant, name, show_progress=False)
    elapsed = time.perf_counter() - started
    if not created:
        raise RuntimeError("the registry reused a version; every round must store new bytes")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--rank", type=int, default=64)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="loraplane-bench-"))
    work.chmod(0o755)
    running: list[services.Service] = []
    try:
        adapter = synthesize_adapter(Path(tempfile.mkdtemp(dir=work)), args.rank)
        weights = adapter / "adapter_model.safetensors"
        size = weights.stat().st_size + (adapter / "adapter_config.json").stat().st_size
        database_url, s3_server = services.start_database_and_store(work, running, BUCKET)
        s3 = services.s3_client(s3_server.url)
        registry = services.start_registry(work / "registry",
                                           services.registry_env(database_url, s3_server, BUCKET))
        running.append(registry)
        engine = make_engine(database_url)
        with unit_of_work(engine) as session:
            _, token = tokens.create_token(session, subject="bench", role=Role.ADMIN, tenant=None,
                                           actor="bench")
            tokens.ensure_tenant(session, "bench")
        engine.dispose()
        client = httpx.Client(base_url=registry.url, timeout=600,
                              headers={"Authorization": f"Bearer {token}"})
        created = client.post("/v1/base-models", json={"name": "bench-70b", "config": BASE})
        created.raise_for_status()

        boto_s, registry_s, growth_mb = [], [], []
        pids = (os.getpid(), registry.process.pid, s3_server.process.pid)

        def measure_boto3(round_number: int) -> list[float]:
            delete_all(s3)
            cpu_before = cpu_of(*pids)
            started = time.perf_counter()
            s3.upload_file(str(weights), BUCKET, f"raw/{round_number}")  # boto3's own defaults
            boto_s.append(time.perf_counter() - started)
            return [after - before for after, before in zip(cpu_of(*pids), cpu_before, strict=True)]

        def measure_registry(round_number: int) -> list[float]:
            delete_all(s3)
            pid = registry.process.pid
            reset_peak_rss(pid)
            before_kb = rss_kb(pid, "VmRSS")
            cpu_before = cpu_of(*pids)
            registry_s.append(upload_via_registry(client, adapter, f"bench/round-{round_number}"))
            growth_mb.append((rss_kb(pid, "VmHWM") - before_kb) * 1024 / MB)
            return [after - before for after, before in zip(cpu_of(*pids), cpu_before, strict=True)]

        for round_number in range(args.rounds):
            # The S3 server slows down after a large object; alternate who goes first.
            if round_number % 2 == 0:
                boto_cpu, registry_cpu = measure_boto3(round_number), measure_registry(round_number)
            else:
                registry_cpu, boto_cpu = measure_registry(round_number), measure_boto3(round_number)
            print(f"round {round_number + 1}: boto3 {size / MB / boto_s[-1]:.1f} MB/s "
                  f"(cpu s: client/registry/s3 {'/'.join(f'{c:.2f}' for c in boto_cpu)}), "
                  f"registry {size / MB / registry_s[-1]:.1f} MB/s "
                  f"(cpu s {'/'.join(f'{c:.2f}' for c in registry_cpu)}), "
                  f"registry RSS growth {growth_mb[-1]:.1f} MB", flush=True)
        client.close()

        boto_mbps = statistics.median(size / MB / s for s in boto_s)
        registry_mbps = statistics.median(size / MB / s for s in registry_s)
        paired = statistics.median(b / r for b, r in zip(boto_s, registry_s, strict=True))
        report.write(
            "upload",
            {
                "rss_growth_mb": round(max(growth_mb), 2),
                "throughput_ratio_vs_boto3": round(paired, 3),
                "throughput_ratio_of_medians": round(registry_mbps / boto_mbps, 3),
                "rss_growth_mb_median": round(statistics.median(growth_mb), 2),
                "registry_throughput_mb_s_median": round(registry_mbps, 1),
                "boto3_throughput_mb_s_median": round(boto_mbps, 1),
                "registry_seconds_median": round(statistics.median(registry_s), 3),
                "boto3_seconds_median": round(statistics.median(boto_s), 3),
            },
            {"rounds": args.rounds, "rank": args.rank, "adapter_bytes": size,
             "dtype": "F16", "targets": list(PROJECTIONS),
             "layers": BASE["num_hidden_layers"], "s3_server": "moto_server",
             "registry_part_bytes": PART_SIZE, "registry_parts_in_flight": PARTS_IN_FLIGHT,
             "boto3_transfer_config": "defaults",
             "database": "postgresql"},
        )
    finally:
        for service in reversed(running):
            service.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
