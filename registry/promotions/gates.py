"""The gates a promotion must pass. Each returns whether it passed, and if not, what blocks it
and how to fix that. They are checked when a promotion is requested and again at approval.

`load` reads every fact the gates judge, once; `judge` applies the rules to them and touches no
database, so the rules can be tested on facts alone (tests/registry/promotions/test_gate_rules.py).

    gates.check(session, target) == gates.judge(gates.load(session, target))
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from registry.active_set import signed_set
from registry.active_set.repository import live_nodes, sizes_of_versions
from registry.pool_lookup import CANARY, PRODUCTION
from registry.auth import lineage
from registry.auth.principal import Principal
from registry.evaluation_policies import service as policies
from registry.evaluations import rules as evaluation_rules
from registry.evaluations.repository import latest_evaluations
from registry.placement.rules import capacity as node_capacity
from registry.promotions import challenger
from registry.promotions.target import Gate, Target
from registry.requalification.fingerprints import engine_difference
from registry.rows import existing
from registry.tables import AdapterVersion, BaseModel, Evaluation, Promotion


@dataclass(frozen=True)
class Facts:
    target: Target
    adapter_base: str  # base model names
    pool_base: str
    # (adapter id, alias) -> version id, as the pool's signed set holds them
    aliases: dict[tuple[int, str], int]
    evaluations: dict[str, Evaluation]  # the version's newest of its own, by suite
    adapter_suites: list[str]  # the suites of the adapter's own evaluation policy
    node_slots: list[int]  # each live node's adapter slots; [] while no node is live
    comparison: challenger.Comparison
    version_bytes: dict[int, int] = field(default_factory=dict)  # of the versions in `aliases` and the target's


def load(session: Session, target: Target) -> Facts:
    pool, adapter = target.pool, target.adapter
    aliases = {(a.adapter_id, a.alias): a.version_id for a in signed_set.load(pool).aliases.values()}
    return Facts(
        target=target,
        adapter_base=existing(session, BaseModel, adapter.base_model_id).name,
        pool_base=existing(session, BaseModel, pool.base_model_id).name,
        aliases=aliases,
        evaluations=latest_evaluations(session, target.version.id),
        adapter_suites=policies.adapter_suites(adapter),
        node_slots=[node_capacity(pool.max_cpu_loras, n.limits) for n in live_nodes(session, pool.id)],
        comparison=challenger.load(session, target),
        version_bytes=sizes_of_versions(session, set(aliases.values()) | {target.version.id})
        if pool.overflow == "on_demand" else {})


def judge(f: Facts) -> list[Gate]:
    t = f.target
    return [_base_model(f), _rank(t), _alias(f), _required_suites(t, f.evaluations),
            _adapter_suites(t, f.adapter_suites, f.evaluations), challenger.judge(t, f.comparison),
            _parity(f.evaluations), _engine(f), _capacity(f)]


def check(session: Session, target: Target) -> list[Gate]:
    return judge(load(session, target))


def blocking(gates: list[Gate]) -> list[Gate]:
    return [gate for gate in gates if not gate.passed]


def _base_model(f: Facts) -> Gate:
    t = f.target
    if t.adapter.base_model_id == t.pool.base_model_id:
        return Gate("base_model", True, "the adapter's base model is the pool's")
    return Gate("base_model", False,
                f"{t.served_name} is for base model {f.adapter_base!r}, pool {t.pool.name!r} serves {f.pool_base!r}",
                "Promote it into a pool of its own base model.")


def _rank(t: Target) -> Gate:
    if t.version.rank <= t.pool.max_lora_rank:
        return Gate("rank", True, f"rank {t.version.rank} ≤ the pool's max_lora_rank {t.pool.max_lora_rank}")
    return Gate("rank", False,
                f"rank {t.version.rank} exceeds pool {t.pool.name!r}'s max_lora_rank {t.pool.max_lora_rank}: "
                "vLLM would refuse to load it",
                f"Retrain with r ≤ {t.pool.max_lora_rank}, or use a pool with a larger max_lora_rank.")


def _alias(f: Facts) -> Gate:
    t = f.target
    if t.alias != CANARY:
        return Gate("alias", True, f"alias {t.alias!r}")
    production = f.aliases.get((t.adapter.id, PRODUCTION))
    if production is None:
        return Gate("alias", False,
                    f"a canary needs a production version to split traffic with, and "
                    f"{t.adapter.name!r} has none in pool {t.pool.name!r}",
                    "Promote a version to 'production' first.")
    if production == t.version.id:
        return Gate("alias", False, f"{t.served_name} is already production in this pool",
                    "Canary a different version.")
    return Gate("alias", True, f"canary at {t.weight}% beside production")



def _required_suites(t: Target, evaluations: dict[str, Evaluation]) -> Gate:
    problems = _unpassed(t.pool.required_suites, evaluations)
    if not problems:
        required = ", ".join(t.pool.required_suites) or "none"
        return Gate("required_suites", True, f"every suite pool {t.pool.name!r} requires passed ({required})")
    return Gate("required_suites", False,
                f"pool {t.pool.name!r} requires suites that have not passed on {t.served_name}: "
                + "; ".join(problems), _EVALUATE_HINT.format(served=t.served_name))


def _adapter_suites(t: Target, own: list[str], evaluations: dict[str, Evaluation]) -> Gate:
    problems = _unpassed(own, evaluations)
    adapter = t.served_name.split("@")[0]
    if not problems:
        return Gate("adapter_suites", True, f"every suite of {adapter}'s own task passed ({', '.join(own)})"
                    if own else f"{adapter} declares no suites of its own")
    return Gate("adapter_suites", False,
                f"{adapter}'s evaluation policy requires suites that have not passed on "
                f"{t.served_name}: " + "; ".join(problems), _EVALUATE_HINT.format(served=t.served_name))


_EVALUATE_HINT = ("Evaluate with `loraplane eval run {served} --suite SUITE`; a failed suite needs a "
                  "better version.")


def _unpassed(suites: list[str], evaluations: dict[str, Evaluation]) -> list[str]:
    problems = []
    for suite in suites:
        evaluation = evaluations.get(suite)
        if evaluation is None:
            problems.append(f"{suite} (not evaluated)")
        elif evaluation.state == evaluation_rules.FAILED:
            detail = ", ".join(evaluation.failing_metrics) or evaluation.reason or "failed"
            problems.append(f"{suite} (failed: {detail})")
        elif evaluation.state != evaluation_rules.PASSED:
            problems.append(f"{suite} (still {evaluation.state})")
    return problems


def _parity(evaluations: dict[str, Evaluation]) -> Gate:
    # suite -> its parity metric, from the finished evaluations that measured it
    measured = {suite: e.metrics["parity"] for suite, e in evaluations.items()
                if e.state in evaluation_rules.FINISHED and e.metrics and "parity" in e.metrics}
    if not measured:
        return Gate("parity", False,
                    "no finished evaluation of this version measured parity between vLLM's "
                    "multi-LoRA kernels and the merged weights",
                    "Evaluate it with a suite that has the 'parity' metric.")
    failed = {suite: parity for suite, parity in measured.items() if not parity.get("passed")}
    if failed:
        detail = "; ".join(f"{suite}: {m.get('detail') or m.get('value')}" for suite, m in failed.items())
        return Gate("parity", False, f"parity failed ({detail})",
                    "vLLM's output differs from the merged weights: check the adapter's dtype "
                    "and target modules against the pool's engine.")
    # A tenant's own suite (tenant/name) may fail the gate, never pass it alone: its tolerance is
    # the uploader's tenant's to set. A global suite is a global admin's.
    trusted = sorted(suite for suite in measured if "/" not in suite)
    if not trusted:
        return Gate("parity", False,
                    f"parity was measured only by the tenant's own suites ({', '.join(sorted(measured))}), "
                    "whose tolerance the tenant sets",
                    "Evaluate it with a global suite that has the 'parity' metric (a pool's "
                    "required suites are global).")
    return Gate("parity", True, f"parity passed in {', '.join(sorted(measured))}")


def _engine(f: Facts) -> Gate:
    """The evaluations the other gates count ran on the engine the pool's nodes serve on: a
    verdict from another vLLM version or dtype says little about the answers here."""
    t, evaluations = f.target, f.evaluations
    if not t.pool.qualified_engines:
        return Gate("engine", True, f"pool {t.pool.name!r} has no qualified engine yet to compare with")
    serves = t.pool.qualified_engines[-1]
    counted = set(t.pool.required_suites) | set(f.adapter_suites) | {
        suite for suite, e in evaluations.items() if "parity" in (e.metrics or {})}
    differing = [f"{suite} (evaluation {e.id} ran on {why})" for suite, e in sorted(evaluations.items())
                 if suite in counted and e.state in evaluation_rules.FINISHED
                 and (why := engine_difference(e.engine, serves))]
    if not differing:
        return Gate("engine", True, f"its evaluations ran on the pool's engine (vLLM {serves.get('vllm_version')})")
    return Gate("engine", False,
                f"evaluations of {t.served_name} ran on another engine than pool {t.pool.name!r} serves on: "
                + "; ".join(differing),
                f"Evaluate it again on a worker whose vLLM is {serves.get('vllm_version')}"
                + (f" with dtype {serves['dtype']}" if serves.get("dtype") else "")
                + f" (`loraplane eval run {t.served_name} --suite SUITE --again`).")


def _capacity(f: Facts) -> Gate:
    t = f.target
    after = {version_id for (adapter_id, alias), version_id in f.aliases.items()
             if (adapter_id, alias) != (t.adapter.id, t.alias)} | {t.version.id}
    capacity, source = pool_capacity(t.pool.max_cpu_loras, f.node_slots)
    if t.pool.overflow == "on_demand":
        return _cold_tier(f, after, capacity, source)
    if len(after) <= capacity:
        return Gate("capacity", True, f"{len(after)} of {capacity} adapter slots ({source})")
    return Gate("capacity", False,
                f"the active set would hold {len(after)} adapters, more than the {capacity} that "
                f"pool {t.pool.name!r} keeps resident ({source}); vLLM would evict and reload "
                "adapters on every switch",
                "Roll back or replace an alias in this pool first, add nodes, or raise the pool's "
                "max_cpu_loras.")


def _cold_tier(f: Facts, after: set[int], capacity: int, source: str) -> Gate:
    """The long tail: the most used stay resident, the rest load on demand, and any node may be
    asked for any of them, so each node's cache must hold the whole set."""
    t = f.target
    needed, budget = sum(f.version_bytes.get(v, 0) for v in after), t.pool.cold_tier_bytes or 0
    hot = min(len(after), capacity)
    tiers = (f"{len(after)} adapters: {hot} resident in {capacity} slots ({source}), "
             f"{len(after) - hot} loaded on demand; each node's cache needs {byte_size(needed)} "
             f"of its {byte_size(budget)} cold tier")
    if needed <= budget:
        return Gate("capacity", True, tiers)
    return Gate("capacity", False, f"pool {t.pool.name!r} would hold {tiers}",
                "Roll back or retire versions in this pool first, or raise its cold_tier_bytes "
                "(`loraplane pool update POOL --cold-tier-bytes N`) once its nodes have the disk.")


def byte_size(count: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"


def pool_capacity(max_cpu_loras: int, node_slots: list[int]) -> tuple[int, str]:
    """Adapters the pool keeps resident: each live node's slots (its max_cpu_loras, at most the
    pool's) added up, since the router keeps each adapter on few nodes. With no live node, one
    node's worth."""
    if not node_slots:
        return max_cpu_loras, "max_cpu_loras of one node; no node is live"
    count = len(node_slots)
    return sum(node_slots), f"max_cpu_loras summed over {count} live node{'s' * (count > 1)}"


def four_eyes(session: Session, promotion: Promotion, approver: Principal) -> Gate:
    """Compare identities and their issuing lineage, never names: an approver who is, issued,
    or was issued by the uploader or the requester, or who shares an issuer with either (below
    the global admins), could have acted alone."""
    version = existing(session, AdapterVersion, promotion.version_id)
    for deed, party in (("uploaded this version", version.uploaded_by_identity_id),
                        ("requested this promotion", promotion.requested_by_identity_id)):
        if party is None:
            return Gate("four_eyes", False, f"who {deed} has no recorded identity, so four-eyes "
                        "cannot be checked", "Request the promotion again with a current token.")
        refused = lineage.could_act_as(session, approver.identity_id, party, deed)
        if refused is not None:
            return Gate("four_eyes", False, *refused)
    return Gate("four_eyes", True, "the approver is neither the uploader nor the requester, nor in "
                "either one's token lineage, and shares no issuer with them")

