"""The promotion gates' rules on facts alone (gates.judge): no database, no registry. The same
rules run through the API in test_gates.py; here each one is pushed to both sides of its line."""

from __future__ import annotations

import dataclasses

import pytest

from registry.evaluation_policies.schemas import ChallengerPolicy
from registry.evaluations.rules import FAILED, PASSED, RUNNING
from registry.promotions import challenger, gates
from registry.promotions.target import Gate, Target
from registry.tables import Adapter, AdapterVersion, Evaluation, Pool

pytestmark = pytest.mark.fast
ENGINE = {"vllm_version": "0.32.0", "dtype": "float32"}


def _evaluation(state=PASSED, metrics=None, engine=ENGINE, **fields) -> Evaluation:
    return Evaluation(id=fields.pop("id", 7), state=state, failing_metrics=fields.pop("failing", []),
                      reason=fields.pop("reason", None), engine=engine,
                      metrics={"parity": {"passed": True, "value": 0.0}} if metrics is None else metrics)


def _facts(*, alias="production", rank=8, adapter_base=1, evaluations=None, aliases=None,
           node_slots=(4,), pool_suites=("smoke",), adapter_suites=(), engines=(ENGINE,),
           comparison=None, weight=None) -> gates.Facts:
    pool = Pool(id=1, name="edge", base_model_id=1, max_lora_rank=16, max_cpu_loras=4,
                required_suites=list(pool_suites), qualified_engines=list(engines))
    adapter = Adapter(id=3, name="summarize", base_model_id=adapter_base, evaluation_policy=None)
    version = AdapterVersion(id=30, adapter_id=3, number=2, rank=rank)
    target = Target(pool, adapter, version, "acme/summarize@2", alias, weight)
    return gates.Facts(
        target=target, adapter_base="tiny" if adapter_base == 1 else "other", pool_base="tiny",
        aliases={} if aliases is None else aliases,
        evaluations={"smoke": _evaluation()} if evaluations is None else evaluations,
        adapter_suites=list(adapter_suites), node_slots=list(node_slots),
        comparison=comparison or challenger.Comparison(None, None, [], ChallengerPolicy(), {}))


def _gate(facts: gates.Facts, name: str) -> Gate:
    return next(g for g in gates.judge(facts) if g.name == name)


def test_a_version_with_every_fact_in_order_passes_every_gate():
    judged = gates.judge(_facts())
    assert [g.name for g in judged] == ["base_model", "rank", "alias", "required_suites",
                                        "adapter_suites", "challenger", "parity", "engine", "capacity"]
    assert gates.blocking(judged) == []


def test_another_base_model_blocks_naming_both():
    gate = _gate(_facts(adapter_base=2), "base_model")
    assert not gate.passed
    assert gate.message == ("acme/summarize@2 is for base model 'other', pool 'edge' serves 'tiny'")


@pytest.mark.parametrize("rank, passed", [(16, True), (17, False)])
def test_rank_is_bounded_by_the_pools_max_lora_rank(rank, passed):
    gate = _gate(_facts(rank=rank), "rank")
    assert gate.passed is passed
    if not passed:
        assert gate.message == "rank 17 exceeds pool 'edge''s max_lora_rank 16: vLLM would refuse to load it"
        assert gate.hint.startswith("Retrain with r ≤ 16")


def test_a_canary_needs_a_production_version_other_than_itself():
    assert "has none in pool 'edge'" in _gate(_facts(alias="canary", weight=10), "alias").message
    itself = _facts(alias="canary", weight=10, aliases={(3, "production"): 30})
    assert _gate(itself, "alias").message == "acme/summarize@2 is already production in this pool"
    beside = _facts(alias="canary", weight=10, aliases={(3, "production"): 29})
    assert _gate(beside, "alias") == Gate("alias", True, "canary at 10% beside production")


@pytest.mark.parametrize("evaluation, says", [
    (None, "smoke (not evaluated)"),
    (_evaluation(FAILED, failing=["exact_match"]), "smoke (failed: exact_match)"),
    (_evaluation(RUNNING), "smoke (still running)"),
])
def test_a_required_suite_that_has_not_passed_blocks_saying_why(evaluation, says):
    gate = _gate(_facts(evaluations={} if evaluation is None else {"smoke": evaluation}), "required_suites")
    assert not gate.passed and gate.message.endswith(says)
    assert "loraplane eval run acme/summarize@2 --suite SUITE" in gate.hint


def test_the_adapters_own_suites_are_required_too():
    gate = _gate(_facts(adapter_suites=["tone"]), "adapter_suites")
    assert not gate.passed and gate.message.endswith("tone (not evaluated)")


def test_parity_must_have_been_measured_and_passed():
    unmeasured = _facts(evaluations={"smoke": _evaluation(metrics={})})
    assert "no finished evaluation of this version measured parity" in _gate(unmeasured, "parity").message
    failed = _facts(evaluations={"smoke": _evaluation(metrics={"parity": {"passed": False, "detail": "drift 0.2"}})})
    assert _gate(failed, "parity").message == "parity failed (smoke: drift 0.2)"


def test_a_tenants_own_suite_may_fail_parity_but_never_pass_it_alone():
    lax = _evaluation(metrics={"parity": {"passed": True, "value": 0.9}})
    own_only = _facts(evaluations={"acme/lax": lax})
    gate = _gate(own_only, "parity")
    assert not gate.passed
    assert gate.message == ("parity was measured only by the tenant's own suites (acme/lax), whose "
                            "tolerance the tenant sets")
    assert _gate(_facts(evaluations={"acme/lax": lax, "smoke": _evaluation()}), "parity").passed
    strict = _evaluation(metrics={"parity": {"passed": False, "detail": "drift 0.2"}})
    assert _gate(_facts(evaluations={"acme/strict": strict, "smoke": _evaluation()}), "parity").message == \
        "parity failed (acme/strict: drift 0.2)"


def test_an_evaluation_on_another_engine_than_the_pool_serves_on_blocks():
    other = _facts(evaluations={"smoke": _evaluation(engine={"vllm_version": "0.31.0"})})
    gate = _gate(other, "engine")
    assert not gate.passed
    assert "evaluation 7 ran on vLLM 0.31.0, not the pool's 0.32.0" in gate.message
    assert _gate(_facts(engines=()), "engine").passed  # nothing qualified yet to compare with


@pytest.mark.parametrize("aliases, slots, passed, says", [
    ({(4, "production"): 40, (5, "production"): 50, (6, "production"): 60}, [4], True, "4 of 4 adapter slots"),
    ({(4, "production"): 40, (5, "production"): 50, (6, "production"): 60, (7, "production"): 70}, [4], False,
     "would hold 5 adapters, more than the 4"),
    ({(4, "production"): 40, (5, "production"): 50, (6, "production"): 60, (7, "production"): 70}, [3, 2], True,
     "5 of 5 adapter slots (max_cpu_loras summed over 2 live nodes)"),
    ({(3, "production"): 29}, [], True, "1 of 4 adapter slots (max_cpu_loras of one node; no node is live)"),
])
def test_capacity_counts_the_set_after_the_change_against_the_live_nodes_slots(aliases, slots, passed, says):
    gate = _gate(_facts(aliases=aliases, node_slots=slots), "capacity")
    assert gate.passed is passed and says in gate.message


def _long_tail(aliases: int, *, cold_tier_bytes: int, each_bytes: int = 100, slots=(4,)) -> gates.Facts:
    facts = _facts(aliases={(100 + i, "production"): 1000 + i for i in range(aliases)}, node_slots=slots)
    pool = facts.target.pool
    pool.overflow, pool.cold_tier_bytes = "on_demand", cold_tier_bytes
    sizes = {1000 + i: each_bytes for i in range(aliases)} | {30: each_bytes}
    return dataclasses.replace(facts, version_bytes=sizes)


def test_a_pool_that_loads_on_demand_holds_more_than_it_keeps_resident_while_its_cold_tier_fits():
    gate = _gate(_long_tail(199, cold_tier_bytes=20_000, slots=(4, 4)), "capacity")
    assert gate.passed
    assert gate.message == ("200 adapters: 8 resident in 8 slots (max_cpu_loras summed over 2 live nodes), "
                            "192 loaded on demand; each node's cache needs 19.5 KiB of its 19.5 KiB cold tier")


def test_a_pool_that_loads_on_demand_refuses_a_set_its_cold_tier_cannot_hold():
    gate = _gate(_long_tail(200, cold_tier_bytes=20_000), "capacity")
    assert not gate.passed
    assert gate.message.startswith("pool 'edge' would hold 201 adapters: 4 resident in 4 slots")
    assert "needs 19.6 KiB of its 19.5 KiB cold tier" in gate.message
    assert "raise its cold_tier_bytes" in gate.hint


def test_the_same_set_in_a_pool_that_refuses_overflow_is_refused_by_its_slots():
    facts = _long_tail(199, cold_tier_bytes=20_000)
    facts.target.pool.overflow, facts.target.pool.cold_tier_bytes = "refuse", None
    gate = _gate(facts, "capacity")
    assert not gate.passed and "would hold 200 adapters, more than the 4" in gate.message


def _pair(mine: float, theirs: float) -> tuple[Evaluation, Evaluation]:
    def run(value):
        return _evaluation(metrics={"exact_match": {"value": value}})
    return run(mine), run(theirs)


@pytest.mark.parametrize("mine, theirs, margin, improve, passed", [
    (0.80, 0.80, 0.0, [], True),
    (0.79, 0.80, 0.0, [], False),   # exact_match's default margin is none
    (0.79, 0.80, 0.05, [], True),   # within the policy's margin
    (0.70, 0.80, 0.05, [], False),  # worse by more than it
    (0.80, 0.80, 0.0, ["exact_match"], False),  # the policy requires it to be better
    (0.81, 0.80, 0.0, ["exact_match"], True),
])
def test_the_challenger_may_be_worse_only_within_the_margin(mine, theirs, margin, improve, passed):
    policy = ChallengerPolicy(margins={"exact_match": margin}, require_improvement=improve)
    comparison = challenger.Comparison("acme/summarize@1", 1, ["tone"], policy,
                                       {"tone": _pair(mine, theirs)})
    gate = _gate(_facts(comparison=comparison), "challenger")
    assert gate.passed is passed
    if not passed:
        assert gate.message.startswith("acme/summarize@2 against acme/summarize@1, which it would replace")
        assert "--against 1" in gate.hint


def test_a_challenger_not_compared_yet_blocks():
    comparison = challenger.Comparison("acme/summarize@1", 1, ["tone"], ChallengerPolicy(), {"tone": None})
    gate = _gate(_facts(comparison=comparison), "challenger")
    assert not gate.passed and "tone: not compared yet" in gate.message


def test_facts_are_plain_values_the_rules_do_not_change():
    facts = _facts()
    before = dataclasses.replace(facts)
    gates.judge(facts)
    assert facts == before
