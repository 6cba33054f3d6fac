"""The merged-weights reference: what the adapter's tokens should be, computed without vLLM.

The base is loaded once per batch, in the engine's dtype, on the worker's accelerator when it has
one (else the CPU, with every core this process may use). Each adapter is merged into it in place
(peft's merge_adapter, the same merge as merge_and_unload) and the weights the merge changed are
put back bit for bit afterwards: no copy of the base per adapter, so the reference holds the base
once plus the LoRA-targeted weights of one adapter (docs/evaluation.md has the sizes). One
teacher-forced forward pass over all examples scores the engine's own greedy tokens. If the
engine's token is the reference's argmax at every step, greedy decoding with the reference would
give the same sequence; the log-probability gap measures kernel or format drift.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class ParityExample:
    max_logprob_diff: float
    tokens_match: bool


def warm_up() -> None:
    """Import torch, transformers and peft now (seconds), not inside the first evaluation."""
    import peft  # noqa: F401
    import transformers  # noqa: F401


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


_kept: dict[tuple, Reference] = {}


def kept_reference(model_dir: Path, *, dtype: str, device: str | None, threads: int | None,
                   keep: bool) -> Reference:
    """The reference of this base, loaded once per worker process while `keep` (the base then
    stays in memory between batches, as the engine's does), else once per call."""
    key = (str(model_dir), dtype, device, threads)
    reference = _kept.get(key) if keep else None
    if reference is None or reference.damaged:
        _kept.clear()  # one base at a time
        reference = Reference(model_dir, dtype=dtype, device=device, threads=threads)
        if keep:
            _kept[key] = reference
    return reference


class Reference:
    """The base, loaded once; each adapter is merged into it in place, then taken out exactly."""

    def __init__(self, model_dir: Path, *, dtype: str = "float32", device: str | None = None,
                 threads: int | None = None) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        if dtype not in DTYPES:
            raise ValueError(f"the parity reference runs in {', '.join(DTYPES)}, not {dtype!r}")
        self.device = device or default_device()
        if self.device == "cpu":
            torch.set_num_threads(threads or usable_cores())
        self.base = AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=getattr(torch, dtype), device_map=self.device).eval()
        self.damaged = False  # a comparison failed part way: the base may not be as loaded

    def compare(self, adapter_dir: Path, items: list[tuple[list[int], list[int], list[float]]], *,
                merge: bool = True) -> list[ParityExample]:
        """items: (prompt ids, the engine's generated ids, the engine's logprobs of those ids).
        merge=False compares with peft's own forward pass instead of merged weights: they differ
        where merging changes more than the adapter does (an embedding LoRA merged into an
        embedding that the output layer shares)."""
        from peft import PeftModel

        self.damaged = True  # until the base is back as it was
        model = PeftModel.from_pretrained(self.base, adapter_dir, torch_device=self.device)
        try:
            with _merged(model) if merge else _as_is():
                results = _score(model, items, self.device)
        finally:
            self.base = model.unload()  # the LoRA layers out again: the base as it was
        self.damaged = False
        return results


def _score(model: Any, items: list[tuple[list[int], list[int], list[float]]], device: str) -> list[ParityExample]:
    import torch

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
        logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
        logprobs = torch.log_softmax(logits.float(), dim=-1).cpu()
    for row, (index, (prompt, output, engine_logprobs)) in enumerate(scored):
        steps = logprobs[row, len(prompt) - 1: len(prompt) + len(output) - 1]
        wanted = torch.tensor(output)
        chosen = steps.gather(1, wanted[:, None])[:, 0]
        gap = (chosen - torch.tensor(engine_logprobs, dtype=torch.float32)).abs().max().item()
        results[index] = ParityExample(gap, bool((steps.argmax(-1) == wanted).all()))
    return results


@contextmanager
def _merged(model: Any) -> Iterator[None]:
    """The adapter merged into the base's weights, and those weights put back exactly after: an
    unmerge would subtract the delta again, leaving rounding behind in every later adapter."""
    from peft.tuners.lora import LoraLayer

    layers: list[Any] = [module for module in model.modules() if isinstance(module, LoraLayer)]
    saved = [layer.get_base_layer().weight.detach().clone() for layer in layers]
    try:
        model.merge_adapter()
        yield
    finally:
        import torch

        with torch.no_grad():
            for layer, weight in zip(layers, saved, strict=True):
                layer.get_base_layer().weight.copy_(weight)
                layer.merged_adapters.clear()


@contextmanager
def _as_is() -> Iterator[None]:
    yield
