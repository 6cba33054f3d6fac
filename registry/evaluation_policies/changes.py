"""What changed between two evaluation policies, each change said in words and marked when it
weakens the policy: a suite no longer required, a margin raised, an improvement no longer
required. Pure: policies in, changes out."""

from __future__ import annotations

from dataclasses import dataclass

from registry.evaluation_policies.schemas import QUALITY_METRICS, EvaluationPolicy


@dataclass(frozen=True)
class Change:
    text: str
    weakens: bool


def between(before: EvaluationPolicy, after: EvaluationPolicy) -> list[Change]:
    """A challenger is compared with its incumbent only on the adapter's own suites: with none
    before, no margin was in force, and setting one weakens nothing."""
    compared = bool(before.required_suites)
    changes = [Change(f"no longer requires suite {s!r}", True)
               for s in before.required_suites if s not in after.required_suites]
    changes += [Change(f"now requires suite {s!r}", False)
                for s in after.required_suites if s not in before.required_suites]
    for metric in QUALITY_METRICS:
        old, new = before.challenger.margin(metric), after.challenger.margin(metric)
        if new != old:
            word = "raised" if new > old else "lowered"
            changes.append(Change(f"the challenger's margin on {metric} {word} from {old:g} to {new:g}",
                                  compared and new > old))
    changes += [Change(f"no longer requires the challenger to improve on {m}", compared)
                for m in before.challenger.require_improvement
                if m not in after.challenger.require_improvement]
    changes += [Change(f"now requires the challenger to improve on {m}", False)
                for m in after.challenger.require_improvement
                if m not in before.challenger.require_improvement]
    return changes


def weakenings(before: EvaluationPolicy, after: EvaluationPolicy) -> list[str]:
    return [c.text for c in between(before, after) if c.weakens]
