"""The merged-weights reference: what the adapter's tokens should be, computed without vLLM.

peft merges the adapter into a float32 copy of the base on the CPU (merge_and_unload), then one
teacher-forced forward pass per example scores the engine's own greedy tokens. If the engine's
token is the reference's argmax at every step, greedy decoding with the reference would give the
same sequence; the log-probability gap measures kernel or format drift.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ParityExample:
    max_logprob_diff: float
    tokens_match: bool


def warm_up() -> None:
    """Import torch, transformers and peft now (seconds), not inside the first evaluation."""
    import peft  # noqa: F401
    import transformers  # noqa: F401


def compare(model_dir: Path, adapter_dir: Path,
            items: list[tuple[list[int], list[int], list[float]]]) -> list[ParityExample]:
    """items: (prompt ids, the engine's generated ids, the engine's logprobs of those ids)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)  # the eval engine shares these cores, and is the one being timed
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, device_map="cpu")
    model = PeftModel.from_pretrained(base, adapter_dir).merge_and_unload().eval()
    results = []
    with torch.inference_mode():
        for prompt_ids, output_ids, engine_logprobs in items:
            if not output_ids:
                results.append(ParityExample(0.0, True))
                continue
            ids = torch.tensor([prompt_ids + output_ids])
            logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1: -1].float()
            logprobs = torch.log_softmax(logits, dim=-1)
            wanted = torch.tensor(output_ids)
            chosen = logprobs.gather(1, wanted[:, None])[:, 0]
            gap = (chosen - torch.tensor(engine_logprobs, dtype=torch.float32)).abs().max().item()
            results.append(ParityExample(gap, bool((logprobs.argmax(-1) == wanted).all())))
    return results
