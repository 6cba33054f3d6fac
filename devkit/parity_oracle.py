"""The parity reference as it was first built, kept as the oracle the in-place one is checked
against (tests and bench/eval_memory.py): each adapter merged into a deep copy of a float32 base
on the CPU with merge_and_unload. Correct and simple, and a copy of the base per adapter."""

from __future__ import annotations

import copy
from pathlib import Path

from workers.evaluation.parity import ParityExample, _score


class CopyingReference:
    def __init__(self, model_dir: Path, *, dtype: str = "float32") -> None:
        import torch
        from transformers import AutoModelForCausalLM

        self.base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype),
                                                         device_map="cpu").eval()

    def compare(self, adapter_dir: Path, items: list[tuple[list[int], list[int], list[float]]], *,
                merge: bool = True) -> list[ParityExample]:
        from peft import PeftModel

        model = PeftModel.from_pretrained(copy.deepcopy(self.base), adapter_dir)
        if merge:
            model = model.merge_and_unload()
        return _score(model, items, "cpu")
