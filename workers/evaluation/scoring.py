"""Turn engine runs into metrics, and metrics into pass or fail against the suite's thresholds.

Each metric reports the adapter's value with the base's beside it, the threshold it was held to,
and whether it passed; the outcome names every failing metric.
"""

from __future__ import annotations

from workers.evaluation import parity_tolerances
from workers.evaluation.parity import ParityExample
from workers.evaluation.runner import SideRun, SuiteWork, mean_of_present
from workers.evaluation.serving_cost import ServingCost


def _text(output: str) -> str:
    return output.strip()


def exact_matches(side: SideRun, work: SuiteWork) -> list[bool]:
    return [_text(g.text) == _text(ref) for g, ref in zip(side.generations, work.references, strict=False)]


def contains(side: SideRun, work: SuiteWork) -> list[bool]:
    return [_text(ref) in g.text for g, ref in zip(side.generations, work.references, strict=False)]


def _rate(flags: list[bool]) -> float:
    return sum(flags) / len(flags) if flags else 0.0


def judge(spec: dict, work: SuiteWork, adapter: SideRun, base: SideRun,
          parity: list[ParityExample] | None, serving: ServingCost | None,
          dtype: str = "float32") -> tuple[dict, list[str]]:
    """Returns (metrics, failing metric names). `serving` is the adapter's like-for-like bursts
    against the base's (serving_cost), measured where the suite has the serving metric. `dtype`
    is the engine's: parity's unset tolerances are the ones measured for it."""
    metrics: dict[str, dict] = {}
    if "exact_match" in spec:
        value, base_value = _rate(exact_matches(adapter, work)), _rate(exact_matches(base, work))
        metrics["exact_match"] = _at_least(value, base_value, spec["exact_match"])
    if "contains" in spec:
        value, base_value = _rate(contains(adapter, work)), _rate(contains(base, work))
        metrics["contains"] = _at_least(value, base_value, spec["contains"])
    if "reference_loglik" in spec:
        loglik = mean_of_present(adapter.reference_logliks)
        base_loglik = mean_of_present(base.reference_logliks)
        margin = spec["reference_loglik"]["min_margin"]
        passed = loglik is not None and base_loglik is not None and loglik - base_loglik >= margin
        gap = None if loglik is None or base_loglik is None else loglik - base_loglik
        metrics["reference_loglik"] = {
            "value": loglik, "base": base_loglik, "threshold": {"min_margin": margin}, "passed": passed,
            "detail": f"adapter minus base = {gap:.4f}" if gap is not None else "not measured"}
    if "parity" in spec and parity is not None:
        tolerance = parity_tolerances.for_dtype(dtype, spec["parity"])
        worst = max((p.max_logprob_diff for p in parity), default=0.0)
        mismatch_rate = 1 - _rate([p.tokens_match for p in parity])
        metrics["parity"] = {
            "value": worst, "base": None, "threshold": {**tolerance, "dtype": dtype},
            "passed": worst <= tolerance["max_logprob_diff"]
            and mismatch_rate <= tolerance["max_token_mismatch_rate"],
            "detail": f"max |logprob diff| {worst:.2e}; greedy tokens differ in "
                      f"{mismatch_rate:.1%} of examples (merged-weights reference)"}
    if "serving" in spec:
        metrics["serving"] = _serving(spec["serving"], serving)
    failing = sorted(name for name, metric in metrics.items() if not metric["passed"])
    return metrics, failing


def _at_least(value: float, base_value: float, threshold: dict) -> dict:
    return {"value": value, "base": base_value, "threshold": threshold,
            "passed": value >= threshold["min"], "detail": ""}


def _serving(limits: dict, cost: ServingCost | None) -> dict:
    if cost is None:
        return {"value": None, "base": 1.0, "threshold": limits, "passed": False,
                "detail": "not measured: the adapter was not served"}
    rate, base_rate, ratio = cost.adapter.tokens_per_s, cost.base.tokens_per_s, cost.throughput_ratio
    ttft, base_ttft = cost.adapter.median_ttft_ms, cost.base.median_ttft_ms
    ttft_ratio = ttft / base_ttft if ttft is not None and base_ttft else None
    passed = ratio >= limits["min_throughput_ratio"]
    if limits.get("max_ttft_ratio") is not None:
        passed = passed and ttft_ratio is not None and ttft_ratio <= limits["max_ttft_ratio"]
    timing = (f"median TTFT {ttft:.1f} ms vs {base_ttft:.1f} ms ({ttft_ratio:.2f}x)" if ttft_ratio is not None
              else "TTFT not measured: start the engine with --enable-per-request-metrics")
    shape = (f"{cost.prompts} prompts x {cost.max_tokens} tokens at concurrency {cost.concurrency}, "
             f"bursts {'-'.join('base' if t == 'A' else 'adapter' for t in cost.order)}")
    return {"value": ratio, "base": 1.0, "threshold": limits, "passed": passed,
            "detail": f"like for like, {shape}: {rate:.1f} tok/s vs {base_rate:.1f} base "
                      f"({ratio:.2f}x, the median of {len(cost.round_ratios)} rounds); {timing}",
            "tokens_per_s": rate, "base_tokens_per_s": base_rate, "round_ratios": cost.round_ratios,
            "ttft_ms": ttft, "base_ttft_ms": base_ttft,
            "ttft_ratio": ttft_ratio, "method": "abba_bursts", "order": cost.order,
            "prompts": cost.prompts, "concurrency": cost.concurrency, "max_tokens": cost.max_tokens}
