"""What the parity reference costs at a real size: peak memory over the base's own bytes and
seconds per adapter, for the in-place reference (workers/evaluation/parity.py) beside the copy per
adapter it replaced (devkit/parity_oracle.py), and whether both give the same results.

    ./dev bench eval_memory [--layers 19] [--adapters 4]

The bench builds a random-weight Llama of about one billion parameters (float32, about 4 GB) and
K LoRA adapters of rank 16 on q_proj and v_proj, then runs each reference in a process of its own,
so that each peak resident set is its own: load the base, compare K adapters on 8 examples of 48
tokens. parity_results_equal_to_copy_method is 1 when both give exactly the same results, on the
tiny base (where the copy method was first checked) and on the large one.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import report

SEQUENCE, EXAMPLES, VOCAB = 48, 8, 32000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=19)  # 0.99 billion parameters
    parser.add_argument("--adapters", type=int, default=4)
    parser.add_argument("--measure", choices=["in_place", "copy"], help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:  # one reference, in a process of its own
        print(json.dumps(_measure(args.measure, args.work)))
        return
    work = Path(tempfile.mkdtemp(prefix="loraplane-bench-eval-memory-"))
    try:
        base_bytes = _build_large(work, args.layers, args.adapters)
        measured = {method: _in_child(method, work) for method in ("in_place", "copy")}
        tiny_equal = _tiny_equal(work, args.adapters)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # about 4 GB
    same_large = measured["in_place"]["results"] == measured["copy"]["results"]
    metrics = {
        "parity_peak_rss_over_base_bytes": round(measured["in_place"]["peak_rss"] / base_bytes, 3),
        "parity_seconds_per_adapter": round(statistics.median(measured["in_place"]["seconds"]), 2),
        "parity_results_equal_to_copy_method": int(tiny_equal and same_large),
        "copy_method_peak_rss_over_base_bytes": round(measured["copy"]["peak_rss"] / base_bytes, 3),
        "copy_method_seconds_per_adapter": round(statistics.median(measured["copy"]["seconds"]), 2),
        "seconds_per_adapter_ratio_copy_over_in_place": round(
            statistics.median(measured["copy"]["seconds"]) / statistics.median(measured["in_place"]["seconds"]), 3),
        "base_load_seconds": round(measured["in_place"]["load_s"], 2),
    }
    report.write("eval_memory", metrics, {
        "base_parameters": base_bytes // 4, "base_bytes": base_bytes, "dtype": "float32", "layers": args.layers,
        "adapters": args.adapters, "rank": 16, "target_modules": ["q_proj", "v_proj"], "examples": EXAMPLES,
        "tokens_per_example": SEQUENCE, "device": "cpu", "equal_on_tiny_base": tiny_equal,
        "equal_on_large_base": same_large})


def _build_large(work: Path, layers: int, adapters: int) -> int:
    """A random ~1B Llama (hidden 2048, MLP 5632, GQA 32/8 heads) and its adapters; its bytes."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=VOCAB, hidden_size=2048, intermediate_size=5632, num_hidden_layers=layers,
                         num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=512,
                         tie_word_embeddings=False, dtype="float32")
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.save_pretrained(work / "base", safe_serialization=True)
    base_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    for index in range(adapters):
        torch.manual_seed(100 + index)
        lora = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "v_proj"],
                                                init_lora_weights=False, task_type="CAUSAL_LM"))
        lora.save_pretrained(work / f"adapter-{index}", safe_serialization=True)
        model = lora.unload()
    return base_bytes


def _items(vocab: int) -> list[tuple[list[int], list[int], list[float]]]:
    half = SEQUENCE // 2
    return [([(7 + 31 * i + 17 * j) % (vocab - 8) + 4 for j in range(half)],
             [(3 + 13 * i + 5 * j) % (vocab - 8) + 4 for j in range(half)], [-1.0] * half)
            for i in range(EXAMPLES)]


def _measure(method: str, work: Path) -> dict:
    from devkit.parity_oracle import CopyingReference
    from workers.evaluation.parity import Reference

    started = time.perf_counter()
    reference = Reference(work / "base", device="cpu") if method == "in_place" else CopyingReference(work / "base")
    load_s = time.perf_counter() - started
    seconds, results = [], []
    for adapter in sorted(work.glob("adapter-*")):
        started = time.perf_counter()
        checks = reference.compare(adapter, _items(VOCAB))
        seconds.append(time.perf_counter() - started)
        results.append([[check.max_logprob_diff, check.tokens_match] for check in checks])
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"peak_rss": peak_kb * 1024, "seconds": seconds, "load_s": load_s, "results": results}


def _in_child(method: str, work: Path) -> dict:
    done = subprocess.run([sys.executable, "-m", "bench.eval_memory", "--measure", method, "--work", str(work)],
                          capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[1])
    return json.loads(done.stdout.strip().splitlines()[-1])


def _tiny_equal(work: Path, adapters: int) -> bool:
    """Today's method on the tiny base, as it was first checked."""
    from devkit.parity_oracle import CopyingReference
    from devkit.tiny_model import build_adapter, build_base_model
    from workers.evaluation.parity import Reference

    base = build_base_model(work / "tiny")
    vocab = json.loads((base / "config.json").read_text())["vocab_size"]
    in_place, copying = Reference(base, device="cpu"), CopyingReference(base)
    for index in range(adapters):
        adapter = build_adapter(base, work / f"tiny-adapter-{index}", r=8 * (index + 1), seed=10 + index)
        if in_place.compare(adapter, _items(vocab)) != copying.compare(adapter, _items(vocab)):
            return False
    return True


if __name__ == "__main__":
    main()
