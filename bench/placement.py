"""Placement against every node loading everything: adapter loads, throughput, p99 TTFT, and how
many adapters move when a node joins.

    ./dev bench placement [--rounds 2 --requests 200 --concurrency 8 --skip-real]

1. A simulation with many nodes and adapters under Zipf traffic, using the registry's own
   placement rules (registry/placement/rules.py). Each node keeps `capacity` adapters resident
   with LRU eviction, as vLLM's CPU cache does. "Load everything": every node holds every
   adapter and requests go round-robin over all nodes. "Placement": requests go round-robin over
   the nodes the placement gives the adapter. Loads are LRU misses. Then one node joins, several
   times over, and the share of adapters some node must newly load is measured.
2. A real run: two vLLM nodes on CPU that keep 3 adapters resident, and 5 promoted adapters
   under Zipf traffic, in alternating turns. "Placement": the agents follow the registry's
   placement and the router sends each request to a node that holds the adapter. "Load
   everything": the agents are stopped, every adapter is loaded into both vLLMs, and a
   round-robin proxy (bench/bare_proxy.py) spreads requests over both. Loads are vLLM opening
   an adapter's weights (bench/reloads.py); each turn starts with an uncounted warm-up.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import statistics
import tempfile
from collections import OrderedDict
from pathlib import Path

import httpx

from bench import bare_proxy, report
from bench.load import run_phase
from bench.reloads import LoadCounter
from bench.serving_pool import PROMPT, serving_pool
from registry.placement.rules import moved, place

SIM = {"nodes": 16, "capacity": 32, "adapters": 400, "requests": 100_000, "zipf_exponent": 1.1}
JOIN_TRIALS = ((8, 96, 600), (16, 48, 600), (32, 24, 600), (16, 200, 2400))  # nodes, capacity, adapters
JOINS_PER_TRIAL = 20  # a different newcomer each time: one join's share is a random draw
REAL = {"nodes": 2, "max_cpu_loras": 3, "adapters": 5, "zipf_exponent": 1.1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--skip-real", action="store_true", help="Only the simulation.")
    args = parser.parse_args()
    metrics, params = simulate()
    if not args.skip_real:
        real_metrics, real_params = real_run(args)
        metrics |= real_metrics
        params["real"] = real_params
    report.write("placement", metrics, params)


# --- simulation -----------------------------------------------------------------------------------


def zipf(names: list[str], exponent: float, seed: int) -> dict[str, float]:
    weights = [1 / (rank + 1) ** exponent for rank in range(len(names))]
    random.Random(seed).shuffle(weights)
    return dict(zip(names, weights))


def lru_loads(requests: list[tuple[str, str]], capacity: int) -> int:
    """Loads when each (node, adapter) request finds the adapter resident or not."""
    caches: dict[str, OrderedDict] = {}
    loads = 0
    for node, name in requests:
        cache = caches.setdefault(node, OrderedDict())
        if name in cache:
            cache.move_to_end(name)
            continue
        loads += 1
        cache[name] = None
        if len(cache) > capacity:
            cache.popitem(last=False)
    return loads


def simulate() -> tuple[dict, dict]:
    names = [f"t/adapter-{i}@1" for i in range(SIM["adapters"])]
    nodes = {f"node-{i}": SIM["capacity"] for i in range(SIM["nodes"])}
    traffic = zipf(names, SIM["zipf_exponent"], seed=3)
    picks = random.Random(5).choices(names, weights=[traffic[n] for n in names], k=SIM["requests"])
    everywhere = itertools.cycle(sorted(nodes))
    baseline = lru_loads([(next(everywhere), name) for name in picks], SIM["capacity"])
    placement = place(names, nodes, traffic)
    turns = {name: itertools.cycle(placement.nodes_of(name)) for name in names}
    placed = lru_loads([(next(turns[name]), name) for name in picks], SIM["capacity"])
    joins = [join_movement(*trial) for trial in JOIN_TRIALS]  # (mean, worst) of moved × N
    metrics = {
        "reload_reduction_vs_load_everything": round(baseline / max(1, placed), 2),
        "moved_fraction_on_join_times_n": max(mean for mean, _ in joins),
        "sim_loads_load_everything": baseline,
        "sim_loads_placement": placed,
    }
    params = {"simulation": {**SIM, "replicas_placed": sum(placement.replicas.values()),
                             "unplaced": len(placement.unplaced),
                             "loads": "LRU misses per node, first loads included"},
              "join_trials": [{"nodes_before": n, "capacity": c, "adapters": a, "joins": JOINS_PER_TRIAL,
                               "mean_moved_fraction_times_n": mean, "worst_moved_fraction_times_n": worst}
                              for (n, c, a), (mean, worst) in zip(JOIN_TRIALS, joins)],
              "moved_fraction_on_join_times_n": "adapters some node must newly load when one node joins, "
                                                "over all adapters, times the node count after the join; "
                                                "the mean over the joins of a trial, the largest of the trials"}
    print(f"simulation: {baseline} loads everywhere, {placed} with placement; join × N: "
          f"{joins} (mean, worst)", flush=True)
    return metrics, params


def join_movement(count: int, capacity: int, adapters: int) -> tuple[float, float]:
    """(mean, worst) over several joins of moved fraction × N."""
    names = [f"t/adapter-{i}@1" for i in range(adapters)]
    traffic = zipf(names, SIM["zipf_exponent"], seed=count)
    nodes = {f"node-{i}": capacity for i in range(count)}
    before = place(names, nodes, traffic)
    shares = []
    for join in range(JOINS_PER_TRIAL):
        after = place(names, {**nodes, f"newcomer-{join}": capacity}, traffic, before)
        shares.append(len(moved(before, after)) / adapters * (count + 1))
    return round(statistics.mean(shares), 3), round(max(shares), 3)


# --- real run -------------------------------------------------------------------------------------


def real_run(args) -> tuple[dict, dict]:
    work = Path(tempfile.mkdtemp(prefix="loraplane-bench-placement-"))
    with serving_pool(work, nodes=REAL["nodes"], max_cpu_loras=REAL["max_cpu_loras"],
                      adapters=REAL["adapters"]) as pool:
        proxy = bare_proxy.start(work / "round-robin", [vllm.url for vllm in pool.vllms])
        counter = LoadCounter([pool.agent_cache(i) for i in range(REAL["nodes"])])
        try:
            turns = asyncio.run(measure(pool, proxy, counter, args))
        finally:
            counter.close()
            proxy.stop()
    return summarise(turns, args)


async def measure(pool, proxy, counter: LoadCounter, args) -> dict[str, list]:
    weights = list(zipf(pool.served_names, REAL["zipf_exponent"], seed=7).values())
    picks = random.Random(11).choices(range(REAL["adapters"]), weights=weights, k=args.requests)
    turns: dict[str, list] = {"placement": [], "load_everything": []}
    for round_index in range(args.rounds):
        order = list(turns) if round_index % 2 == 0 else list(reversed(turns))
        for way in order:
            if way == "placement":
                restart_agents(pool)
                url, key, names = pool.router.url, pool.app_key, pool.adapter_names
            else:
                load_everything(pool)
                url, key, names = proxy.url, "unused", pool.served_names
            await run_phase(url, key, lambda i: names[i % len(names)], n=4 * len(names), concurrency=4,
                            stream=True, prompt=PROMPT, max_tokens=args.max_tokens)
            counter.take()  # the warm-up's loads are not counted
            phase = await run_phase(url, key, lambda i: names[picks[i]], n=args.requests,
                                    concurrency=args.concurrency, stream=True, prompt=PROMPT,
                                    max_tokens=args.max_tokens)
            if phase.failures:
                raise RuntimeError(f"{way}: {phase.failure_summary()}")
            ttfts = sorted(s.ttft_s * 1000 for s in phase.samples)
            p99 = ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))]
            turns[way].append({"loads": counter.take(), "requests_per_s": phase.throughput, "p99_ttft_ms": p99})
            print(f"round {round_index + 1} {way}: {turns[way][-1]}", flush=True)
    return turns


def restart_agents(pool) -> None:
    """The agents follow the placement again: each node unloads what is not its part."""
    for index in range(REAL["nodes"]):
        if pool.agents[index].process.poll() is not None:
            pool.restart_agent(index)
    for index, vllm in enumerate(pool.vllms):
        _wait(lambda vllm=vllm: len(_loaded(vllm.url)) <= REAL["max_cpu_loras"], f"node-{index} to converge")


def load_everything(pool) -> None:
    """Stop the agents (they would unload what is not their part) and load every adapter into
    every vLLM, from whichever agent's cache holds it."""
    for agent in pool.agents:
        agent.stop()
    folders = {folder.name: folder for i in range(REAL["nodes"]) for folder in pool.agent_cache(i).iterdir()
               if folder.is_dir()}
    digests = _digests(pool)
    for vllm in pool.vllms:
        loaded = _loaded(vllm.url)
        for name in pool.served_names:
            if name not in loaded:
                response = httpx.post(vllm.url + "/v1/load_lora_adapter", timeout=60,
                                      json={"lora_name": name, "lora_path": str(folders[digests[name]])})
                response.raise_for_status()


def _digests(pool) -> dict[str, str]:
    response = httpx.get(pool.registry.url + "/v1/pools/bench-serving/active-set", timeout=30,
                         headers={"Authorization": f"Bearer {pool.router_token}"})
    response.raise_for_status()
    return {e["served_name"]: e["digest"] for e in response.json()["entries"]}


def _loaded(vllm_url: str) -> set[str]:
    models = httpx.get(vllm_url + "/v1/models", timeout=10).json()["data"]
    return {m["id"] for m in models if m.get("parent")}


def _wait(check, what: str, timeout_s: float = 120) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.2)


def summarise(turns: dict[str, list], args) -> tuple[dict, dict]:
    def total(way: str, key: str) -> float:
        return sum(turn[key] for turn in turns[way])

    def median(way: str, key: str) -> float:
        return statistics.median(turn[key] for turn in turns[way])

    ratios = [p["requests_per_s"] / e["requests_per_s"] for p, e in zip(turns["placement"], turns["load_everything"])]
    metrics = {
        "real_reload_reduction_vs_load_everything": round(total("load_everything", "loads") /
                                                          max(1, total("placement", "loads")), 2),
        "real_loads_placement": total("placement", "loads"),
        "real_loads_load_everything": total("load_everything", "loads"),
        "real_throughput_ratio_vs_load_everything": round(statistics.median(ratios), 3),
        "real_requests_per_s_placement": round(median("placement", "requests_per_s"), 2),
        "real_requests_per_s_load_everything": round(median("load_everything", "requests_per_s"), 2),
        "real_p99_ttft_ms_placement": round(median("placement", "p99_ttft_ms"), 1),
        "real_p99_ttft_ms_load_everything": round(median("load_everything", "p99_ttft_ms"), 1),
    }
    params = {**REAL, "rounds": args.rounds, "requests_per_turn": args.requests,
              "concurrency": args.concurrency, "max_tokens": args.max_tokens, "streamed": True,
              "traffic": "Zipf over the adapters, the same sequence every turn",
              "loads": "opens of adapter_model.safetensors in the agents' caches (inotify), warm-ups excluded",
              "turns": turns}
    return metrics, params


if __name__ == "__main__":
    main()
