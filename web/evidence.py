"""What a reviewer weighs, drawn from one evaluation: each metric against the base, parity with
the merged-weights reference, the per-example differences, and the serving cost."""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup

from registry.evaluations.schemas import EvaluationOut, ExampleOut
from web.charts import Bar, bar_chart

OWN_SECTIONS = ("parity", "serving")  # drawn in sections of their own


@dataclass(frozen=True)
class Evidence:
    evaluation: EvaluationOut
    metric_charts: list[tuple[str, Markup]]
    parity_chart: Markup
    likelihood_chart: Markup
    serving_chart: Markup
    examples: list[ExampleOut]
    differing: int  # examples where the adapter's output differs from the base's
    comparison: Comparison | None = None


@dataclass(frozen=True)
class Comparison:
    """A challenger beside the incumbent it would replace: one batch, one engine."""

    incumbent: EvaluationOut
    metrics: list[tuple[str, float | None, float | None]]  # (metric, challenger, incumbent)
    rows: list[tuple[ExampleOut, ExampleOut | None]]  # the challenger's example, the incumbent's


def evidence_of(evaluation: EvaluationOut, incumbent: EvaluationOut | None = None) -> Evidence:
    examples = evaluation.examples.items if evaluation.examples else []
    return Evidence(
        evaluation=evaluation,
        metric_charts=[(name, _metric_chart(name, metric)) for name, metric in evaluation.metrics.items()
                       if name not in OWN_SECTIONS],
        parity_chart=_parity_chart(evaluation, examples),
        likelihood_chart=_likelihood_chart(examples),
        serving_chart=_serving_chart(evaluation),
        examples=examples,
        differing=sum(e.output.strip() != e.base_output.strip() for e in examples),
        comparison=_comparison(evaluation, examples, incumbent) if incumbent is not None else None,
    )


def _comparison(evaluation: EvaluationOut, examples: list[ExampleOut], incumbent: EvaluationOut) -> Comparison:
    theirs = {e.position: e for e in (incumbent.examples.items if incumbent.examples else [])}
    metrics = [(name, m.value, (incumbent.metrics[name].value if name in incumbent.metrics else None))
               for name, m in evaluation.metrics.items() if name not in OWN_SECTIONS]
    return Comparison(incumbent=incumbent, metrics=metrics,
                      rows=[(mine, theirs.get(mine.position)) for mine in examples])


def _metric_chart(name: str, metric) -> Markup:
    threshold = metric.threshold.get("min")
    label = f"pass at ≥ {threshold:g}" if threshold is not None else ""
    return bar_chart(f"{name}: adapter against base", [
        Bar("adapter", metric.value, "adapter", "passed" if metric.passed else "failed"),
        Bar("base model", metric.base, "base")], threshold=threshold, threshold_label=label)


def _parity_chart(evaluation: EvaluationOut, examples: list[ExampleOut]) -> Markup:
    parity = evaluation.metrics.get("parity")
    measured = [e for e in examples if e.parity_max_logprob_diff is not None]
    if parity is None or not measured:
        return Markup("")
    tolerance = parity.threshold.get("max_logprob_diff")
    return bar_chart("Parity: largest |logprob difference| per example, multi-LoRA against merged weights",
                     [Bar(f"example {e.position + 1}", e.parity_max_logprob_diff,
                          "adapter" if e.parity_tokens_match else "over",
                          "" if e.parity_tokens_match else "tokens differ") for e in measured],
                     threshold=tolerance, threshold_label=f"tolerance {tolerance:g}" if tolerance else "",
                     log=True)


def _likelihood_chart(examples: list[ExampleOut]) -> Markup:
    """How much likelier the adapter finds each reference answer than the base does."""
    bars = [Bar(f"example {e.position + 1}", e.reference_loglik - e.base_reference_loglik,
                "adapter" if e.reference_loglik >= e.base_reference_loglik else "over")
            for e in examples if e.reference_loglik is not None and e.base_reference_loglik is not None]
    return bar_chart("Per example: log-likelihood of the reference answer, adapter minus base "
                     "(above zero: the adapter is closer to the reference)", bars, digits=2) \
        if bars else Markup("")


def _serving_chart(evaluation: EvaluationOut) -> Markup:
    serving = evaluation.metrics.get("serving")
    if serving is None:
        return Markup("")
    extra = serving.model_extra or {}
    bars = [Bar("adapter", extra.get("tokens_per_s"), "adapter", "measured"),
            Bar("base, same bursts", extra.get("base_tokens_per_s"), "base", "measured")]
    return bar_chart("Serving throughput on the evaluation engine", bars, unit="tok/s", digits=1)
