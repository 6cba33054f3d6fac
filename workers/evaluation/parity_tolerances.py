"""The parity tolerance of each dtype, used where a suite's parity metric leaves it unset:
how far the engine's answers with an adapter may be from the merged-weights reference in the
same dtype. Measured, never guessed: bench/parity_dtypes.py serves the task kit's adapters in each
dtype and compares them as the worker does (bench/results/parity_dtypes.json); each tolerance is
a few times the largest gap seen there, so rounding passes and a wrong adapter does not."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tolerance:
    max_logprob_diff: float
    max_token_mismatch_rate: float


# Measured on vLLM 0.32 on CPU (bench/results/parity_dtypes.json; 256 answers per dtype, and the
# same prompts with ignore_eos, 24 tokens, whose long tails drift most). Largest gap and share of
# answers whose greedy tokens differ: float32 2.0e-05 and 0; bfloat16 0.40 and 5.9% (0.58 and 16.8%
# with the long tails); float16 0.045 and 0.8% (0.078 and 3.1%). The faults parity exists to catch
# gap far more, in every dtype: the same answers against the adapter at half its scale gap by 7.8
# nats or more, without its v_proj LoRA by 5.8, against another adapter by 9.3.
DEFAULTS = {
    "float32": Tolerance(max_logprob_diff=1e-3, max_token_mismatch_rate=0.0),
    "bfloat16": Tolerance(max_logprob_diff=1.5, max_token_mismatch_rate=0.35),
    "float16": Tolerance(max_logprob_diff=0.3, max_token_mismatch_rate=0.1),
}


def for_dtype(dtype: str, suite: dict) -> dict[str, float]:
    """The suite's own values where it sets them, the dtype's measured ones elsewhere."""
    default = DEFAULTS[dtype]
    return {"max_logprob_diff": suite.get("max_logprob_diff") or default.max_logprob_diff,
            "max_token_mismatch_rate": suite["max_token_mismatch_rate"]
            if suite.get("max_token_mismatch_rate") is not None else default.max_token_mismatch_rate}
