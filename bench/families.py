"""Every family the registry takes, against a real vLLM on CPU; and what deriving and checking cost.

    ./dev bench families [--families llama,phi3,...] [--validation-rank 16]

Part 1, for each family of devkit/family_models.py: a tiny random-weight base (with the task
kit's tokenizer) served by a real vLLM, and three real peft adapters (attention, all-linear, an
embedding LoRA). For each, the registry's verdict and vLLM's (devkit/family_parity.py) are set
side by side. A family whose engine cannot start here is reported as such, with vLLM's error. It
is then not among the families vLLM serves here.

Part 2 has no engine. It measures deriving the module table of a 70B-class config (Llama 3 70B's
shape, no weights) in fresh processes that derive as a registry does: `table_derivation_ms`, a
derivation once the warm process runs (a forked process), and `table_first_derivation_ms`, the
first (it imports torch and transformers to start the warm one). Each is a median. It also
measures checking a large adapter's weights against that table
(header, every tensor's name and shape, every value finite), beside the sha256 of the same
bytes: the floor for reading them once.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from bench import report
from devkit import engine, family_parity
from devkit.family_models import FAMILIES, build_base, config_of
from devkit.services import free_port, start_vllm, stop_group
from devkit.tiny_model import build_base_model
from registry.adapters import lora_layout, peft_config, safetensors_check
from registry.adapters.validation import header_limit
from registry.base_models.derivation import derive

LLAMA_70B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192,
             "intermediate_size": 28672, "num_attention_heads": 64, "num_key_value_heads": 8,
             "num_hidden_layers": 80, "vocab_size": 128256, "rope_theta": 500000.0}


def family_outcomes(family: str, tokenizer: Path, work: Path) -> dict:
    base = build_base(family, work / "base", tokenizer=tokenizer)
    table = family_parity.table_of(base)
    tried = family_parity.adapters(base, table, work)
    adapters = {recipe: served for recipe, (served, _) in tried.items()}
    spec = engine.EngineSpec(model_dir=base, served_name=f"family-{family}", port=free_port(),
                             max_loras=1, max_cpu_loras=2, max_lora_rank=8)
    try:
        service = start_vllm(work / "vllm", spec)
    except Exception as failed:  # noqa: BLE001 - the family does not run here; say why
        return {"family": family, "architecture": table.architecture, "vllm_runs_here": False,
                "vllm_error": str(failed).strip().splitlines()[-1][:300] if str(failed).strip() else repr(failed),
                "outcomes": [{"recipe": recipe, "registry": family_parity.registry_verdict(table, path)[0]}
                             for recipe, path in adapters.items()]}
    served = family_parity.Engine(service.url, spec.served_name, base, log=service.log)
    outcomes = []
    try:
        for recipe, path in adapters.items():
            outcomes.append(family_parity.Outcome(family, recipe, *family_parity.registry_verdict(table, path),
                                                  *served.verdict(f"{family}-{recipe}", path,
                                                                  reference=tried[recipe][1])))
            if outcomes[-1].vllm == "crashed":  # the family's LoRA does not run here; no engine left
                return {"family": family, "architecture": table.architecture, "vllm_runs_here": False,
                        "vllm_error": outcomes[-1].vllm_message,
                        "outcomes": [{"recipe": recipe, "registry": family_parity.registry_verdict(table, path)[0]}
                                     for recipe, path in adapters.items()]}
    finally:
        served.close()
        stop_group(service)
    return {"family": family, "architecture": table.architecture, "vllm_runs_here": True,
            "outcomes": [outcome.to_json() for outcome in outcomes]}


REGISTRY_DERIVATIONS = """
import json, sys, time
from registry.base_models.derivation import derive
config = json.load(sys.stdin)
times = []
for _ in range(4):
    start = time.perf_counter()
    derive(config)
    times.append((time.perf_counter() - start) * 1000)
print(json.dumps(times))
"""


def derivation_ms(runs: int) -> tuple[float, float]:
    """Medians over `runs` fresh processes that derive as a registry does (a program whose main
    module a derivation need not import again): each one's later derivations (forked from its
    warm process) and its first (which imports torch and transformers to start the warm one)."""
    warm, first = [], []
    for _ in range(runs):
        done = subprocess.run([sys.executable, "-c", REGISTRY_DERIVATIONS], input=json.dumps(LLAMA_70B),
                              capture_output=True, text=True, check=True)
        times = json.loads(done.stdout)
        first.append(times[0])
        warm.extend(times[1:])
    return statistics.median(warm), statistics.median(first)


def validation_figures(rank: int, work: Path, rounds: int) -> dict:
    """A rank-`rank` all-linear float16 adapter of the 70B-class base, checked and hashed in turns."""
    table = derive(LLAMA_70B)
    rng = np.random.default_rng(0)
    tensors = {}
    for entry in table.modules:
        if entry.kind != "linear" or not entry.layers:
            continue
        a = rng.standard_normal((rank, entry.in_features)).astype(np.float16)
        b = rng.standard_normal((entry.out_features, rank)).astype(np.float16)
        for layer in entry.layers:
            module = "base_model.model." + entry.name.replace(".*.", f".{layer}.", 1)
            tensors[f"{module}.lora_A.weight"], tensors[f"{module}.lora_B.weight"] = a, b
    weights = work / "adapter_model.safetensors"
    save_file(tensors, weights, metadata={"format": "pt"})
    config = peft_config.parse_config(
        b'{"peft_type": "LORA", "r": %d, "lora_alpha": %d, "target_modules": ["q_proj", "k_proj", '
        b'"v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], "base_model_name_or_path": "llama-70b"}'
        % (rank, 2 * rank))
    size = weights.stat().st_size
    checked, hashed = [], []
    for _ in range(rounds):  # side by side, alternating, on the same (cached) bytes
        start = time.perf_counter()
        with weights.open("rb") as file:
            found = safetensors_check.read_tensors(file, size, header_limit(table, 64 * 2**20))
            lora_layout.check_layout(found, config, table)
            for tensor in found:
                safetensors_check.check_finite(file, tensor)
        checked.append(time.perf_counter() - start)
        start = time.perf_counter()
        digest = hashlib.sha256()
        with weights.open("rb") as file:
            while chunk := file.read(1 << 20):
                digest.update(chunk)
        hashed.append(time.perf_counter() - start)
    gb = size / 1e9
    return {"validation_ms_per_gb": round(statistics.median(checked) * 1000 / gb, 1),
            "hashing_ms_per_gb": round(statistics.median(hashed) * 1000 / gb, 1),
            "validation_over_hashing": round(statistics.median(c / h for c, h in zip(checked, hashed)), 3),
            "validation_adapter_bytes": size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", default=",".join(FAMILIES), help="comma-separated (default: all)")
    parser.add_argument("--validation-rank", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    families = [name for name in args.families.split(",") if name]
    with tempfile.TemporaryDirectory(prefix="loraplane-families-") as folder:
        work = Path(folder)
        tokenizer = build_base_model(work / "tokenizer")
        results = []
        for family in families:
            print(f"{family}: building, starting vLLM, trying each recipe ...", flush=True)
            results.append(family_outcomes(family, tokenizer, work / family))
            print(results[-1], flush=True)
        derivation, first_derivation = derivation_ms(args.rounds)
        validation = validation_figures(args.validation_rank, work, args.rounds)
    served_here = [r for r in results if r["vllm_runs_here"]]
    metrics = {
        "families_tried": len(results),
        "families_accepted": sum(any(o["registry"] == "accepted" for o in r["outcomes"]) for r in results),
        "families_vllm_serves_here": sum(any(o["vllm"] == "served" for o in r["outcomes"]) for r in served_here),
        "families_agreeing_with_vllm": sum(all(o["agree"] for o in r["outcomes"]) for r in served_here),
        "recipes_agreeing_with_vllm": sum(o["agree"] for r in served_here for o in r["outcomes"]),
        "recipes_tried_on_vllm": sum(len(r["outcomes"]) for r in served_here),
        "table_derivation_ms": round(derivation, 1),
        "table_first_derivation_ms": round(first_derivation, 1),
        **validation,
    }
    report.write("families", metrics, {"families": results, "derivation_config": "Llama 3 70B shape",
                                       "validation_rank": args.validation_rank, "rounds": args.rounds,
                                       "vllm": family_parity.vllm_version(),
                                       "config_of": {f: config_of(f) for f in families}})


if __name__ == "__main__":
    main()
