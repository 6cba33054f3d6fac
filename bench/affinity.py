"""Adapter affinity against round-robin: how many adapter loads each costs, and its throughput.

    ./dev bench affinity [--rounds 3 --requests 200 --concurrency 8]

Two real vLLM nodes on CPU, each keeping at most 3 adapters resident (`--max-cpu-loras 3`), and
5 promoted adapters: more than one node holds, within what the pool holds. The same uniform
random mix of the 5 is sent, in alternating turns, through the router and through a round-robin
proxy over both nodes (bench/bare_proxy.py). Loads are vLLM opening an adapter's weights in an
agent's cache (bench/reloads.py). Each turn starts with an uncounted warm-up of a few requests,
so it measures steady state rather than the previous turn's leftovers.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
from pathlib import Path

from bench import bare_proxy, report
from bench.load import run_phase
from bench.reloads import LoadCounter
from bench.serving_pool import PROMPT, serving_pool

NODES, MAX_CPU_LORAS, ADAPTERS = 2, 3, 5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=16)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="loraplane-bench-affinity-"))
    with serving_pool(work, nodes=NODES, max_cpu_loras=MAX_CPU_LORAS, adapters=ADAPTERS) as pool:
        proxy = bare_proxy.start(work / "round-robin", [vllm.url for vllm in pool.vllms])
        counter = LoadCounter([pool.agent_cache(i) for i in range(NODES)])
        try:
            ways = {"affinity": (pool.router.url, pool.app_key, pool.adapter_names),
                    "round_robin": (proxy.url, "unused", pool.served_names)}
            turns = asyncio.run(measure(ways, counter, args))
        finally:
            counter.close()
            proxy.stop()
    metrics, params = summarise(turns, args)
    report.write("affinity", metrics, params)


async def measure(ways: dict, counter: LoadCounter, args) -> dict[str, list[tuple[int, float]]]:
    """(loads, requests per second) of each turn of each way."""
    mix = random.Random(7)
    picks = [mix.randrange(ADAPTERS) for _ in range(args.requests)]
    turns: dict[str, list[tuple[int, float]]] = {way: [] for way in ways}
    for round_index in range(args.rounds):
        order = list(ways) if round_index % 2 == 0 else list(reversed(ways))
        for way in order:
            url, key, names = ways[way]
            await run_phase(url, key, lambda i: names[i % ADAPTERS], n=4 * ADAPTERS, concurrency=4,
                            stream=False, prompt=PROMPT, max_tokens=args.max_tokens)
            counter.take()  # the warm-up's loads are not counted
            phase = await run_phase(url, key, lambda i: names[picks[i]], n=args.requests,
                                    concurrency=args.concurrency, stream=False, prompt=PROMPT,
                                    max_tokens=args.max_tokens)
            if phase.failures:
                raise RuntimeError(f"{way}: {phase.failure_summary()}")
            turns[way].append((counter.take(), phase.throughput))
            print(f"round {round_index + 1} {way}: {turns[way][-1][0]} loads, "
                  f"{phase.throughput:.1f} requests/s", flush=True)
    return turns


def summarise(turns: dict[str, list[tuple[int, float]]], args) -> tuple[dict, dict]:
    loads = {way: sum(n for n, _ in rows) for way, rows in turns.items()}
    ratios = [a[1] / r[1] for a, r in zip(turns["affinity"], turns["round_robin"])]
    metrics = {
        # With no load at all under affinity, the reduction is reported against one load.
        "reload_reduction_vs_round_robin": round(loads["round_robin"] / max(1, loads["affinity"]), 2),
        "throughput_ratio_vs_round_robin": round(statistics.median(ratios), 3),
        "affinity_loads": loads["affinity"],
        "round_robin_loads": loads["round_robin"],
        "affinity_requests_per_s": round(statistics.median(t for _, t in turns["affinity"]), 2),
        "round_robin_requests_per_s": round(statistics.median(t for _, t in turns["round_robin"]), 2),
    }
    params = {"nodes": NODES, "max_cpu_loras_per_node": MAX_CPU_LORAS, "adapters": ADAPTERS,
              "rounds": args.rounds, "requests_per_turn": args.requests,
              "concurrency": args.concurrency, "max_tokens": args.max_tokens,
              "traffic": "uniform random over the adapters, the same sequence every turn",
              "loads": "opens of adapter_model.safetensors in the agents' caches (inotify), "
                       "summed over all turns, warm-ups excluded",
              "reload_reduction": "round-robin loads over affinity loads, or over 1 when affinity had none",
              "loads_per_turn": {way: [n for n, _ in rows] for way, rows in turns.items()}}
    return metrics, params


if __name__ == "__main__":
    main()
