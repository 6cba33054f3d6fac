"""The long tail: a pool holding far more approved adapters than its nodes keep resident, served on
demand through vLLM's resolver, against the same pool refusing overflow; then what the registry,
agent and router cost per change as the pool grows from 200 adapters to 2,000.

    ./dev bench longtail [--requests 400 --concurrency 4 --scale 2000] [--scale-only | --serving-only]

1. On-demand serving. Two real vLLM nodes on CPU keeping 4 adapters resident each
   (max_cpu_loras 4), each with loraplane's resolver plugin and an agent answering it, and the
   router in front; 200 random adapters of the task kit's base; one Zipf(1.1) trace of requests
   (rank 1 is adapter 0), sent twice through the router, streamed, `--concurrency` at a time:
   - "refuse": the pool as it was before overflow, holding only the 8 most used adapters (the
     capacity gate refuses a 9th): requests for the other 192 are answered 404;
   - "on_demand": the same pool switched to overflow on_demand with every adapter promoted.
   Every answer is checked against its adapter's reference: its greedy answer from node 0's vLLM
   with the adapter loaded straight from its build folder, before loraplane served it. A request
   is cold when the router sent it to a node that did not hold its version (its
   `x-loraplane-residency` header); TTFT is the time to the first streamed token, at the client.
   `resolver_verify_ms_p50` is the agents' own time from the resolver's question to the verified
   folder (their log line per resolve).
2. Registry scale, in the same pool at 200 adapters and again after promoting more up to
   `--scale`: a node's part of the active set (every version, under on_demand) in bytes and its
   median time to build and send; the pool's dashboard page; one agent pass over its part (the
   agents' loraplane_agent_pass_seconds, mean over a few seconds of passes); and the router's
   catalog and fleet update from the whole set (its own code, both sets timed in turn in a fresh
   interpreter). Each is reported at both points, with its growth over linear: (at 2,000 / at
   200) / 10, at most 1 when it grows no worse than linearly.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import re
import statistics
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench import report
from bench.serving_pool import BASE, POOL, PROMPT, TENANT, ServingPool, adapter_name, serving_pool
from devkit import services
from devkit.pipeline_steps import evaluations_of, finish_evaluation, request_promotion, upload_dir
from devkit.services import wait_for
from devkit.tiny_model import build_adapters
from registry.db import make_engine
from serving.router.main import follow_active_set
from serving.router.fleet import Fleet

ON_DEMAND = {"nodes": 2, "max_cpu_loras": 4, "adapters": 200, "zipf_exponent": 1.1, "max_tokens": 16}
COLD_TIER_BYTES = 8 << 30
RESOLVED = re.compile(r"resolved \S+ for vLLM in ([\d.]+) s")
SEED = 5000
ROUTER_SETTINGS = {"LORAPLANE_ROUTER_NODES_POLL_S": "0.5"}
LORA_ALPHA = 64  # a scale of 8: answers that tell the adapters apart


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--adapters", type=int, default=ON_DEMAND["adapters"], help="Adapters served on demand.")
    parser.add_argument("--scale", type=int, default=2000, help="Adapters in the pool at the second scale point.")
    parser.add_argument("--scale-only", action="store_true", help=(
        "Only the registry-scale half; its figures replace those of the last result's, whose "
        "serving figures stay as they were measured."))
    parser.add_argument("--serving-only", action="store_true", help=(
        "Only the on-demand serving half; the last result's registry-scale figures stay as they "
        "were measured."))
    args = parser.parse_args()
    ON_DEMAND["adapters"] = args.adapters
    adapters, slots = ON_DEMAND["adapters"], ON_DEMAND["nodes"] * ON_DEMAND["max_cpu_loras"]
    with tempfile.TemporaryDirectory(prefix="loraplane-longtail-") as tmp:
        work = Path(tmp)
        folders = build_adapters(_kit_base(), work / "adapters", range(SEED, SEED + adapters), lora_alpha=LORA_ALPHA,
                                 base_model_name=BASE)
        work.chmod(0o755)  # the postgres user must reach the pool's data folder below
        (work / "pool").mkdir()
        with serving_pool(work / "pool", nodes=ON_DEMAND["nodes"], max_cpu_loras=ON_DEMAND["max_cpu_loras"],
                          adapters=0, folders=folders[:slots], resolver=True,
                          router_settings=ROUTER_SETTINGS) as pool:
            if args.scale_only:
                metrics, params = _last_serving_figures()
                with _client(pool.registry.url, pool.admin_token) as admin:
                    admin.patch(f"/v1/pools/{POOL}", json={"overflow": "on_demand",
                                                           "cold_tier_bytes": COLD_TIER_BYTES}).raise_for_status()
                    promote_rest(pool, admin, folders, len(pool.served_names))
            else:
                metrics, params = serve_on_demand(pool, folders, args)
            if args.serving_only:
                scale_metrics, scale_params = _last_scale_figures()
            elif args.scale > adapters:
                scale_metrics, scale_params = registry_scale(pool, work, args.scale)
            else:
                scale_metrics, scale_params = {}, {}
    metrics |= scale_metrics
    report.write("longtail", metrics, {**params, **scale_params, "on_demand": ON_DEMAND,
                                       "requests": args.requests, "concurrency": args.concurrency})


SCALE_METRICS = ("active_set_bytes", "active_set_build_ms", "pool_page_ms", "agent_pass_ms", "router_catalog_update_ms")
SCALE_PARAMS = ("scale_points", "approval_seconds_each_growing_to_scale", "active_set_build_ms_quartiles")


def _last_serving_figures() -> tuple[dict, dict]:
    """The serving half of the last result, kept beside a scale-only run's figures."""
    last = json.loads((report.RESULTS / "longtail.json").read_text())
    metrics = {name: value for name, value in last["metrics"].items() if not name.startswith(SCALE_METRICS)}
    kept = {k: v for k, v in last["params"].items() if not k.startswith(SCALE_PARAMS + ("scale_figures_from",))}
    return metrics, {**kept, "serving_figures_from": "the previous run (./dev bench longtail), kept by --scale-only"}


def _last_scale_figures() -> tuple[dict, dict]:
    """The registry-scale half of the last result, kept beside a serving-only run's figures."""
    last = json.loads((report.RESULTS / "longtail.json").read_text())
    metrics = {name: value for name, value in last["metrics"].items() if name.startswith(SCALE_METRICS)}
    kept = {k: v for k, v in last["params"].items() if k.startswith(SCALE_PARAMS)}
    return metrics, {**kept, "scale_figures_from": "the previous run (./dev bench longtail), kept by --serving-only"}


def _kit_base() -> Path:
    from bench.serving_pool import REPO
    from devkit.task_kit import build_task_kit

    return build_task_kit(REPO / ".cache" / "task-kit", base_model_name=BASE).base_dir


def serve_on_demand(pool: ServingPool, folders: list[Path], args) -> tuple[dict, dict]:
    references = reference_answers(pool.vllms[0].url, folders)
    rng = random.Random(11)
    weights = [1 / (rank ** ON_DEMAND["zipf_exponent"]) for rank in range(1, len(folders) + 1)]
    trace = rng.choices(range(len(folders)), weights=weights, k=args.requests)
    warm_up(pool, trace[:8])

    refused = asyncio.run(run_trace(pool, trace, args.concurrency))
    admin = _client(pool.registry.url, pool.admin_token)
    switched = admin.patch(f"/v1/pools/{POOL}", json={"overflow": "on_demand", "cold_tier_bytes": COLD_TIER_BYTES})
    switched.raise_for_status()
    promote_rest(pool, admin, folders, len(pool.served_names))
    logs_before = [_resolve_times(agent.log) for agent in pool.agents]
    answered = asyncio.run(run_trace(pool, trace, args.concurrency))
    resolve_ms = [ms for agent, before in zip(pool.agents, logs_before, strict=True)
                  for ms in _resolve_times(agent.log)[len(before):]]
    admin.close()

    ok = [r for r in answered if r["status"] == 200]
    cold = [r["ttft_ms"] for r in ok if r["residency"] == "cold"]
    warm = [r["ttft_ms"] for r in ok if r["residency"] == "resident"]
    wrong = [r for r in ok if r["text"] != references[r["index"]]]
    metrics = {
        "wrong_answers": len(wrong),
        "served_fraction": round(len(ok) / len(answered), 4),
        "served_fraction_refuse_baseline": round(sum(r["status"] == 200 for r in refused) / len(refused), 4),
        "resident_hit_ratio": round(len(warm) / len(ok), 4) if ok else 0.0,
        "cold_ttft_p50_ms": _quantile(cold, 0.5), "cold_ttft_p99_ms": _quantile(cold, 0.99),
        "warm_ttft_p50_ms": _quantile(warm, 0.5), "warm_ttft_p99_ms": _quantile(warm, 0.99),
        "cold_over_warm_ttft_p50": round(_quantile(cold, 0.5) / _quantile(warm, 0.5), 2) if cold and warm else 0.0,
        "resolver_verify_ms_p50": _quantile(resolve_ms, 0.5),
        "cold_requests": len(cold),
        "refuse_baseline_not_found": sum(r["status"] == 404 for r in refused),
    }
    params = {"distinct_adapters_requested": len(set(trace)),
              "distinct_references": len(set(references.values())),
              "statuses_on_demand": dict(Counter(str(r["status"]) for r in answered)),
              "statuses_refuse": dict(Counter(str(r["status"]) for r in refused)),
              "wrong_examples": [{"adapter": r["index"], "got": r["text"], "reference": references[r["index"]]}
                                 for r in wrong[:5]],
              "resolves_timed": len(resolve_ms)}
    return metrics, params


def reference_answers(vllm_url: str, folders: list[Path]) -> dict[int, str]:
    """Each adapter's greedy answer, from the engine with the adapter loaded from its folder."""
    answers = {}
    with httpx.Client(base_url=vllm_url, timeout=120) as client:
        for index, folder in enumerate(folders):
            name = f"reference-{index}"
            client.post("/v1/load_lora_adapter", json={"lora_name": name, "lora_path": str(folder)}).raise_for_status()
            answer = client.post("/v1/completions", json={"model": name, "prompt": PROMPT, "temperature": 0,
                                                          "max_tokens": ON_DEMAND["max_tokens"]})
            answer.raise_for_status()
            answers[index] = answer.json()["choices"][0]["text"]
            client.post("/v1/unload_lora_adapter", json={"lora_name": name}).raise_for_status()
    return answers


def warm_up(pool: ServingPool, indices: list[int]) -> None:
    """The router knows the set and its nodes before anything is timed."""
    def answered() -> bool:
        return asyncio.run(run_trace(pool, indices, 1))[0]["status"] == 200
    wait_for(answered, timeout_s=120, what="the router to answer")


async def run_trace(pool: ServingPool, trace: list[int], concurrency: int) -> list[dict]:
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=pool.router.url, timeout=300,
                                 headers={"Authorization": f"Bearer {pool.app_key}"}) as client:
        async def one(index: int) -> dict:
            async with gate:
                return await _streamed(client, index)
        return await asyncio.gather(*(one(index) for index in trace))


async def _streamed(client: httpx.AsyncClient, index: int) -> dict:
    body = {"model": adapter_name(index), "prompt": PROMPT, "temperature": 0,
            "max_tokens": ON_DEMAND["max_tokens"], "stream": True}
    started, ttft, text = time.perf_counter(), None, []
    async with client.stream("POST", "/v1/completions", json=body) as response:
        if response.status_code != 200:
            await response.aread()
            return {"index": index, "status": response.status_code, "text": None, "residency": None,
                    "ttft_ms": None}
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])["choices"][0]["text"]
            if ttft is None:
                ttft = (time.perf_counter() - started) * 1000
            text.append(chunk)
    return {"index": index, "status": 200, "text": "".join(text), "ttft_ms": ttft,
            "residency": response.headers.get("x-loraplane-residency")}


def promote_rest(pool: ServingPool, admin: httpx.Client, folders: list[Path], start: int) -> float:
    """Promote folders[start:] as bench-<index>: uploads and their recorded evaluations two at a
    time, then each promotion requested and approved in turn. Returns the seconds per promotion,
    and waits until the router lists them all."""
    engine = make_engine(pool.database_url)

    def upload(index: int) -> dict:
        with _client(pool.registry.url, pool.uploader_token) as uploader:
            return upload_dir(uploader, adapter_name(index), folders[index])

    with ThreadPoolExecutor(2) as uploads:
        versions = list(uploads.map(upload, range(start, len(folders))))
    for version in versions:  # one at a time: each extends the audit chain
        path = f"/v1/adapters/{TENANT}/{version['adapter']}/versions/{version['number']}/evaluations"
        admin.post(path, json={"suite": "bench-parity"}).raise_for_status()
        for evaluation in evaluations_of(admin, version):
            finish_evaluation(engine, evaluation["id"])
    uploader = _client(pool.registry.url, pool.uploader_token)
    started = time.monotonic()
    for version in versions:
        requested = request_promotion(uploader, POOL, version)
        assert requested.status_code == 201, requested.text
        admin.post(f"/v1/promotions/{requested.json()['id']}/approve", json={"comment": "ok"}).raise_for_status()
        pool.served_names.append(version["served_name"])
    took = time.monotonic() - started
    uploader.close()
    engine.dispose()
    app = _client(pool.router.url, pool.app_key)
    wait_for(lambda: len(app.get("/v1/models").json()["data"]) >= 3 * len(folders), timeout_s=600,
             what="the router to list every adapter")
    app.close()
    return took / max(1, len(versions))


def registry_scale(pool: ServingPool, work: Path, scale: int) -> tuple[dict, dict]:
    small = len(pool.served_names)
    at_small = scale_point(pool)
    admin = _client(pool.registry.url, pool.admin_token)
    more = build_adapters(_kit_base(), work / "more-adapters", range(SEED + small, SEED + scale), lora_alpha=LORA_ALPHA,
                          base_model_name=BASE)
    folders = [Path()] * small + more
    # The nodes and the router step away while the pool grows (each approval would wake them on
    # these two cores), and come back to the grown set, as after a restart.
    for agent in pool.agents:
        agent.stop()
    pool.router.stop()
    pool.router = services.start_router(work / "router-again", pool=POOL, registry_url=pool.registry.url,
                                        token=pool.router_token, settings=ROUTER_SETTINGS)
    try:
        promotion_s = promote_rest(pool, admin, folders, small)
        generation = admin.get(f"/v1/pools/{POOL}/rollout").json()["generation"]
        admin.close()
        for index in range(len(pool.agents)):
            pool.restart_agent(index)
        wait_for(lambda: all(_agent_generation(agent) >= generation for agent in pool.agents), timeout_s=600,
                 what="the agents to apply the grown set")
        with _client(pool.registry.url, pool.admin_token) as admin:  # placed again, and loaded
            wait_for(lambda: _converged(admin), timeout_s=600, what="the nodes to converge on their parts")
        at_large = scale_point(pool)
    finally:
        pool.router.stop()  # started here: the pool's own clean-up stops only the first
    at_small["router_catalog_update_ms"], at_large["router_catalog_update_ms"] = router_catalog_ms(
        at_small.pop("whole_set"), at_large.pop("whole_set"))
    spread = {f"active_set_build_ms_quartiles_{count}": point.pop("build_ms_quartiles")
              for count, point in ((small, at_small), (scale, at_large))}
    metrics = {}
    for name in at_small:
        metrics[f"{name}_{small}"], metrics[f"{name}_{scale}"] = at_small[name], at_large[name]
        growth = (at_large[name] / at_small[name]) / (scale / small) if at_small[name] else 0.0
        metrics[f"{name}_growth_over_linear"] = round(growth, 3)
    return metrics, {"scale_points": [small, scale], "approval_seconds_each_growing_to_scale": round(promotion_s, 3),
                     **spread}


def scale_point(pool: ServingPool) -> dict[str, float]:
    time.sleep(5)  # the agents' passes after the last promotion are done
    admin = _client(pool.registry.url, pool.admin_token)
    router = _client(pool.registry.url, pool.router_token)
    part_ms, sizes = [], []
    for probe in range(15):
        # A node id not asked for before: the registry renders each node's part once per
        # generation, so each of these is a build, not its cached body.
        started = time.perf_counter()
        part = admin.get(f"/v1/pools/{POOL}/active-set", params={"node": f"probe-{time.monotonic_ns()}-{probe}"})
        part_ms.append((time.perf_counter() - started) * 1000)
        part.raise_for_status()
        assert len(part.json()["entries"]) == len(pool.served_names)
        sizes.append(len(part.content))
    whole = router.get(f"/v1/pools/{POOL}/active-set").json()
    admin.close()
    router.close()
    return {"active_set_bytes": float(statistics.median(sizes)),
            "active_set_build_ms": round(statistics.median(part_ms), 2),
            "pool_page_ms": pool_page_ms(pool),
            "agent_pass_ms": agent_pass_ms(pool),
            "whole_set": whole,
            "build_ms_quartiles": [round(q, 2) for q in statistics.quantiles(part_ms, n=4)]}


def _converged(admin: httpx.Client) -> bool:
    rollout = admin.get(f"/v1/pools/{POOL}/rollout").json()
    return rollout["nodes_total"] > 0 and rollout["nodes_converged"] == rollout["nodes_total"]


def router_catalog_ms(small: dict, large: dict, rounds: int = 25) -> tuple[float, float]:
    """Median ms of the router's catalog and fleet update (follow_active_set) from each whole set,
    the two timed in turn in a fresh interpreter (as a router process holds little else; this one
    holds the whole run)."""
    with multiprocessing.get_context("spawn").Pool(1) as fresh:
        return fresh.apply(_catalog_times, (small, large, rounds))


def _catalog_times(small: dict, large: dict, rounds: int) -> tuple[float, float]:
    times: dict[int, list[float]] = {0: [], 1: []}
    for _ in range(rounds):
        for index, whole in enumerate((small, large)):
            started = time.perf_counter()
            follow_active_set(Fleet(spill_outstanding=8), POOL, whole["generation"], whole["entries"],
                              on_demand=whole["overflow"] == "on_demand")
            times[index].append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times[0]), 2), round(statistics.median(times[1]), 2)


def pool_page_ms(pool: ServingPool) -> float:
    with httpx.Client(base_url=pool.registry.url, timeout=120) as browser:
        form = browser.get("/ui/sign-in")
        csrf = form.text.split('name="csrf_token" value="')[1].split('"')[0]
        browser.post("/ui/sign-in", data={"token": pool.admin_token, "csrf_token": csrf, "next": "/ui/approvals"})
        times = []
        for _ in range(5):
            started = time.perf_counter()
            page = browser.get(f"/ui/pools/{POOL}")
            times.append((time.perf_counter() - started) * 1000)
            page.raise_for_status()
            assert "Long tail" in page.text, "the pool page shows no long-tail section"
    return round(statistics.median(times), 2)


def agent_pass_ms(pool: ServingPool, seconds: float = 6) -> float:
    """Mean pass time over both agents' passes in the next `seconds`."""
    before = [_pass_totals(agent) for agent in pool.agents]
    time.sleep(seconds)
    after = [_pass_totals(agent) for agent in pool.agents]
    total = sum(a[0] - b[0] for a, b in zip(after, before, strict=True))
    count = sum(a[1] - b[1] for a, b in zip(after, before, strict=True))
    return round(total / count * 1000, 2) if count else 0.0


def _agent_generation(agent) -> float:
    try:
        text = httpx.get(agent.url + "/metrics", timeout=30).text
    except httpx.HTTPError:
        return -1
    return next((s.value for f in text_string_to_metric_families(text) for s in f.samples
                 if s.name == "loraplane_agent_generation_applied"), -1)


def _pass_totals(agent) -> tuple[float, float]:
    text = httpx.get(agent.url + "/metrics", timeout=30).text
    values = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
              if s.name.startswith("loraplane_agent_pass_seconds")}
    return values.get("loraplane_agent_pass_seconds_sum", 0.0), values.get("loraplane_agent_pass_seconds_count", 0.0)


def _client(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=120, headers={"Authorization": f"Bearer {token}"})


def _resolve_times(log: Path) -> list[float]:
    return [float(seconds) * 1000 for seconds in RESOLVED.findall(log.read_text(errors="replace"))]


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


if __name__ == "__main__":
    main()
