"""The merged-weights reference: what the adapter's tokens should be, computed without vLLM.

peft merges the adapter into a float32 copy of the base on the CPU (merge_and_unload), then one
teacher-forced forward pass over all examples scores the engine's own greedy tokens. If the
engine's token is the reference's argmax at every step, greedy decoding with the reference would
give the same sequence; the log-probability gap measures kernel or format drift.
"""

from __future__ import annotations

import copy
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


class Reference:
    """The base, loaded once per batch; each adapter is merged into a copy of it."""

    def __init__(self, model_dir: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(1)  # the eval engine shares these cores, and is the one being timed
        self.base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                         device_map="cpu").eval()

    def compare(self, adapter_dir: Path, items: list[tuple[list[int], list[int], list[float]]], *,
                merge: bool = True) -> list[ParityExample]:
        """items: (prompt ids, the engine's generated ids, the engine's logprobs of those ids).
        merge=False compares with peft's own forward pass instead of merged weights: they differ
        where merging changes more than the adapter does (an embedding LoRA merged into an
        embedding that the output layer shares)."""
        import torch
        from peft import PeftModel

        model = PeftModel.from_pretrained(copy.deepcopy(self.base), adapter_dir)
        if merge:
            model = model.merge_and_unload()
        scored = [(i, item) for i, item in enumerate(items) if item[1]]
        results = [ParityExample(0.0, True)] * len(items)
        if not scored:
            return results
        width = max(len(prompt) + len(output) for _, (prompt, output, _) in scored)
        ids = torch.zeros((len(scored), width), dtype=torch.long)
        mask = torch.zeros((len(scored), width), dtype=torch.long)
        for row, (_, (prompt, output, _)) in enumerate(scored):
            sequence = prompt + output
            ids[row, :len(sequence)] = torch.tensor(sequence)
            mask[row, :len(sequence)] = 1  # right padding: positions and causal context are unchanged
        with torch.inference_mode():
            logprobs = torch.log_softmax(model(input_ids=ids, attention_mask=mask).logits.float(), dim=-1)
        for row, (index, (prompt, output, engine_logprobs)) in enumerate(scored):
            steps = logprobs[row, len(prompt) - 1: len(prompt) + len(output) - 1]
            wanted = torch.tensor(output)
            chosen = steps.gather(1, wanted[:, None])[:, 0]
            gap = (chosen - torch.tensor(engine_logprobs, dtype=torch.float32)).abs().max().item()
            results[index] = ParityExample(gap, bool((steps.argmax(-1) == wanted).all()))
        return results
