"""The challenger gate: a version that would replace another is compared with it on the
adapter's own suites, both evaluated on one engine in one batch. On every task metric the
challenger may be worse than the incumbent by at most the policy's non-inferiority margin, and
must be better where the policy requires improvement."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from registry.active_set import signed_set
from registry.pool_lookup import CANARY, PRODUCTION
from registry.adapters import service as adapters
from registry.eval_suites import service as suites
from registry.evaluation_policies import service as policies
from registry.evaluation_policies.schemas import QUALITY_METRICS, ChallengerPolicy
from registry.evaluations import repository as evaluations
from registry.evaluations import rules as evaluation_rules
from registry.promotions.target import Gate, Target
from registry.requalification.fingerprints import engine_difference
from registry.tables import AdapterVersion, Evaluation

NAME = "challenger"


@dataclass(frozen=True)
class Comparison:
    """What the challenger gate judges, read once (`load`)."""
    incumbent_name: str | None  # the served name of the version it would replace; None for none
    incumbent_number: int | None
    required_suites: list[str]  # the adapter's own suites
    policy: ChallengerPolicy
    # suite -> the newest (challenger, incumbent) evaluations of the pair on it, if any
    pairs: dict[str, tuple[Evaluation, Evaluation] | None]


def load(session: Session, t: Target) -> Comparison:
    incumbent = _incumbent(session, t)
    policy = policies.of(t.adapter)
    if incumbent is None:
        return Comparison(None, None, list(policy.required_suites), policy.challenger, {})
    pairs = {suite_name: evaluations.latest_pair(session, t.version.id,
                                                 suites.get_row(session, suite_name).id, incumbent.id)
             for suite_name in policy.required_suites}
    return Comparison(adapters.version_out(session, incumbent).served_name, incumbent.number,
                      list(policy.required_suites), policy.challenger, pairs)


def judge(t: Target, c: Comparison) -> Gate:
    if c.incumbent_name is None:
        return Gate(NAME, True, f"no other version serves {t.alias!r} in pool {t.pool.name!r}; "
                    "nothing to compare with")
    if not c.required_suites:
        return Gate(NAME, True, f"{t.adapter.name!r} declares no suites of its own, so "
                    f"{t.served_name} is not compared with {c.incumbent_name}")
    compared: list[str] = []
    problems: list[str] = []
    measured: set[str] = set()
    for suite_name in c.required_suites:
        blocks, said = _judge(suite_name, c.pairs.get(suite_name), c.incumbent_name, c.policy, measured,
                              t.pool.qualified_engines[-1] if t.pool.qualified_engines else None)
        (problems if blocks else compared).append(said)
    unmeasured = [m for m in c.policy.require_improvement if m not in measured]
    if unmeasured and not problems:
        problems.append(f"the policy requires {', '.join(unmeasured)} to improve, and no suite of "
                        f"{t.adapter.name!r} measured it on both versions")
    if not problems:
        return Gate(NAME, True, f"not worse than {c.incumbent_name}: " + "; ".join(compared))
    return Gate(NAME, False, f"{t.served_name} against {c.incumbent_name}, which it would replace: "
                + "; ".join(problems),
                f"Compare them with `loraplane eval run {t.served_name} --suite SUITE --against "
                f"{c.incumbent_number}` (with `--again` after the pool's engine changed); a worse "
                "challenger needs a better version (the margins are the adapter's evaluation policy).")


def _incumbent(session: Session, t: Target) -> AdapterVersion | None:
    """What the version would replace: the alias's version; a canary's rival is production."""
    alias = PRODUCTION if t.alias == CANARY else t.alias
    version_id = signed_set.version_at(t.pool, t.adapter.id, alias)
    return None if version_id in (None, t.version.id) else session.get(AdapterVersion, version_id)


def _judge(suite: str, pair: tuple[Evaluation, Evaluation] | None, incumbent: str,
           policy: ChallengerPolicy, measured: set[str], serves: dict | None) -> tuple[bool, str]:
    """(blocks, what to say) for one suite; adds the metrics it compared to `measured`. With the
    pool's qualified engine (`serves`), the pair must have run on it, as every evaluation a gate
    counts must."""
    if pair is None:
        return True, f"{suite}: not compared yet"
    challenger_run, incumbent_run = pair
    for who, run in (("the challenger", challenger_run), (incumbent, incumbent_run)):
        if run.state not in evaluation_rules.FINISHED:
            return True, f"{suite}: the comparison is still {run.state} (evaluation {challenger_run.id})"
        if not run.metrics:
            return True, f"{suite}: {who} could not be evaluated ({run.reason or 'no metrics'})"
    if challenger_run.engine != incumbent_run.engine:
        # A half evaluated again alone (its worker died between the two records) may have run
        # on another engine: the comparison is only fair on one.
        return True, (f"{suite}: the two versions were evaluated on different engines "
                      f"({_engine_text(challenger_run.engine)} and {_engine_text(incumbent_run.engine)})")
    why = engine_difference(challenger_run.engine, serves) if serves is not None else None
    if why is not None:
        return True, f"{suite}: the comparison ran on {why}"
    # Both runs have metrics: a run without them returned above.
    my_metrics, their_metrics = challenger_run.metrics or {}, incumbent_run.metrics or {}
    scores, worse = [], []
    for metric in QUALITY_METRICS:
        mine = (my_metrics.get(metric) or {}).get("value")
        theirs = (their_metrics.get(metric) or {}).get("value")
        if mine is None or theirs is None:
            continue
        measured.add(metric)
        margin = policy.margin(metric)
        said = f"{metric} {mine:.4g} vs {theirs:.4g}"
        scores.append(said)
        if mine < theirs - margin:
            worse.append(f"{said} for {incumbent}, worse by more than the margin {margin:g}")
        elif metric in policy.require_improvement and not mine > theirs:
            worse.append(f"{said} for {incumbent}, and the policy requires it to be better")
    if worse:
        return True, f"{suite}: " + ", ".join(worse)
    return False, f"{suite}: " + (", ".join(scores) or "no task metric to compare")


def _engine_text(engine: dict | None) -> str:
    if not engine:
        return "none recorded"
    return f"vLLM {engine.get('vllm_version')} at {engine.get('url')}"
