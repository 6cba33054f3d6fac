"""Parity per dtype, measured: how far vLLM serving an adapter (runtime-loaded, multi-LoRA) is
from the worker's merged-weights reference in the same dtype (workers/evaluation/parity.py), as the
worker compares them. The default tolerances (workers/evaluation/parity_tolerances.py) come from
these figures.

    ./dev bench parity_dtypes                   # vLLM on CPU, each dtype it starts in
    python -m bench.parity_dtypes --engine-url http://gpu-host:8000 --dtype bfloat16 --device cuda

For each dtype the task kit's base is served (--max-loras 4), its four adapters are loaded, and
both suites' 64 prompts are generated greedily (16 tokens, stopping at the end of sequence, as a
suite's defaults do) with each; the reference compares every generation on the same device class
the worker would use. The same answers are also compared with references that are wrong in the
ways parity exists to catch: another adapter, the adapter at half its scale (a wrong lora_alpha or
scaling), and the adapter without its v_proj LoRA (a module dropped). The smallest gap each shows,
over the kit's adapters, must stay above the tolerance. Per dtype: the largest |log-probability
gap| over every generated token, its 99th percentile and median over examples, the share of
examples whose greedy tokens differ, and the tolerance the code uses beside them. A dtype the
engine refuses to start in is reported as engine_started_<dtype> 0. With --engine-url the engine
is one already running (a GPU's, say) in --dtype, serving the kit's base as "kit".
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench import report
from devkit import services
from devkit.task_kit import build_task_kit
from workers.evaluation import parity, parity_tolerances
from workers.evaluation.engine import EngineClient

REPO = Path(__file__).resolve().parents[1]
SERVED = "kit"
DTYPES = ("float32", "bfloat16", "float16")


Answers = list[tuple[list[int], list[int], list[float]]]


async def generations(url: str, kit, max_tokens: int, ignore_eos: bool) -> dict[str, Answers]:
    """Per adapter: (prompt ids, generated ids, their log-probabilities) for every suite prompt."""
    client = EngineClient(url, timeout_s=600, max_in_flight=8)
    try:
        prompts = [row["prompt"] for rows in kit.suites.values() for row in rows]
        prompt_ids = [await client.tokenize(prompt) for prompt in prompts]
        found = {}
        for name, folder in kit.adapters.items():
            await client.load_adapter(name, str(folder))
            made = await client.generate_many(name, prompt_ids, max_tokens=max_tokens, stop=[], ignore_eos=ignore_eos)
            found[name] = [(ids, g.token_ids, g.logprobs) for ids, g in zip(prompt_ids, made, strict=True)]
            await client.unload_adapter(name)
        return found
    finally:
        await client.aclose()


def faulty(adapter_dir: Path, out: Path, fault: str) -> Path:
    """A copy of the adapter with a fault a tolerance must catch: every lora_B at half its scale
    (a wrong lora_alpha or rank-stabilised scaling), or its v_proj LoRA gone (a module dropped)."""
    from safetensors.torch import load_file, save_file

    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(adapter_dir / "adapter_config.json", out / "adapter_config.json")
    tensors = load_file(adapter_dir / "adapter_model.safetensors")
    if fault == "half_scale":
        tensors = {k: v * 0.5 if "lora_B" in k else v for k, v in tensors.items()}
    else:
        tensors = {k: v for k, v in tensors.items() if ".v_proj." not in k}
    save_file(tensors, out / "adapter_model.safetensors")
    return out


FAULTS = ("half_scale", "v_proj_dropped")


def measure(url: str, kit, dtype: str, device: str, max_tokens: int, ignore_eos: bool) -> dict[str, float]:
    started = time.perf_counter()
    served = asyncio.run(generations(url, kit, max_tokens, ignore_eos))
    reference = parity.Reference(kit.base_dir, dtype=dtype, device=device)
    gaps, mismatched, wrong_worst, wrong_mismatch = [], 0, [], []
    fault_worst: dict[str, list[float]] = {}
    fault_mismatch: dict[str, list[float]] = {}
    names = sorted(served)
    for index, name in enumerate(names):
        for example in reference.compare(kit.adapters[name], served[name]):
            gaps.append(example.max_logprob_diff)
            mismatched += not example.tokens_match
        # The same answers against another adapter's reference: what a wrong adapter looks like.
        other = reference.compare(kit.adapters[names[(index + 1) % len(names)]], served[name])
        wrong_worst.append(max(e.max_logprob_diff for e in other))
        wrong_mismatch.append(sum(not e.tokens_match for e in other) / len(other))
        # The true answers against a faulty copy's reference: what that fault looks like.
        with tempfile.TemporaryDirectory() as scratch:
            for fault in FAULTS:
                broken = reference.compare(faulty(kit.adapters[name], Path(scratch) / fault, fault), served[name])
                fault_worst.setdefault(fault, []).append(max(e.max_logprob_diff for e in broken))
                fault_mismatch.setdefault(fault, []).append(sum(not e.tokens_match for e in broken) / len(broken))
    tolerance = parity_tolerances.DEFAULTS[dtype]
    worst = max(gaps)
    return {f"parity_max_logprob_diff_{dtype}": worst,
            f"wrong_adapter_min_of_max_logprob_diff_{dtype}": min(wrong_worst),
            f"wrong_adapter_min_token_mismatch_rate_{dtype}": min(wrong_mismatch),
            **{f"{fault}_min_of_max_logprob_diff_{dtype}": min(fault_worst[fault]) for fault in FAULTS},
            **{f"{fault}_min_token_mismatch_rate_{dtype}": min(fault_mismatch[fault]) for fault in FAULTS},
            f"parity_p99_logprob_diff_{dtype}": statistics.quantiles(gaps, n=100)[98],
            f"parity_median_logprob_diff_{dtype}": statistics.median(gaps),
            f"parity_token_mismatch_rate_{dtype}": mismatched / len(gaps),
            f"parity_examples_{dtype}": len(gaps),
            f"tolerance_max_logprob_diff_{dtype}": tolerance.max_logprob_diff,
            f"tolerance_max_token_mismatch_rate_{dtype}": tolerance.max_token_mismatch_rate,
            f"tolerance_headroom_{dtype}": tolerance.max_logprob_diff / worst if worst else 0.0,
            f"engine_started_{dtype}": 1, f"seconds_{dtype}": round(time.perf_counter() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=DTYPES, action="append", help="Default: every dtype.")
    parser.add_argument("--device", default="cpu", help="The reference's device (cuda on a GPU).")
    parser.add_argument("--engine-url", help="An engine already running in --dtype, serving the kit as 'kit'.")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--ignore-eos", action="store_true", help="Generate every token (long tails).")
    parser.add_argument("--results", default="parity_dtypes", help="bench/results/<name>.json")
    args = parser.parse_args()
    dtypes = args.dtype or list(DTYPES)
    if args.engine_url and len(dtypes) != 1:
        parser.error("--engine-url measures the one dtype its engine runs in: pass --dtype once")

    kit = build_task_kit(REPO / ".cache" / "task-kit")
    work = Path(tempfile.mkdtemp(prefix="loraplane-bench-parity-"))
    metrics: dict[str, float] = {}
    for dtype in dtypes:
        if args.engine_url:
            metrics.update(measure(args.engine_url, kit, dtype, args.device, args.max_tokens, args.ignore_eos))
            continue
        try:
            engine = services.start_vllm(work / dtype, services.kit_engine(kit, SERVED, dtype=dtype, max_loras=4))
        except RuntimeError as refused:  # this CPU's vLLM has no kernels for it
            print(f"{dtype}: the engine did not start: {str(refused).splitlines()[0]}")
            metrics[f"engine_started_{dtype}"] = 0
            continue
        try:
            metrics.update(measure(engine.url, kit, dtype, args.device, args.max_tokens, args.ignore_eos))
        finally:
            services.stop_group(engine)
        print({k: v for k, v in metrics.items() if k.endswith(dtype)})
    report.write(args.results, metrics, {
        "dtypes": dtypes, "device": args.device, "engine": args.engine_url or "vLLM on CPU (this machine)",
        "adapters": sorted(kit.adapters), "prompts_per_adapter": sum(len(r) for r in kit.suites.values()),
        "max_tokens": args.max_tokens, "ignore_eos": args.ignore_eos})


if __name__ == "__main__":
    main()
