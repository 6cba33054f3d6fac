"""Parity is judged against the tolerance of the engine's dtype where a suite leaves it unset,
and against the suite's own where it sets one."""

from __future__ import annotations

import pytest

from registry.eval_suites.schemas import SuiteMetrics
from workers.evaluation import parity_tolerances, scoring
from workers.evaluation.parity import ParityExample
from workers.evaluation.runner import SideRun, SuiteWork

pytestmark = pytest.mark.fast

WORK = SuiteWork(suite_id=1, prompts=["1 =>"] * 4, references=["one"] * 4, max_tokens=8, stop=[],
                 ignore_eos=False)


def parity_of(spec: dict, gaps: list[float], matches: list[bool], dtype: str) -> dict:
    stored = SuiteMetrics.model_validate({"parity": spec}).model_dump(exclude_none=True)
    checks = [ParityExample(gap, match) for gap, match in zip(gaps, matches, strict=True)]
    metrics, _ = scoring.judge(stored, WORK, SideRun(), SideRun(), checks, None, dtype=dtype)
    return metrics["parity"]


def test_an_unset_tolerance_is_the_one_measured_for_the_engines_dtype():
    # A gap bfloat16's rounding makes: far past float32's tolerance, within bfloat16's.
    gaps, matches = [0.2, 0.01, 0.0, 0.05], [True, True, True, True]
    in_float32 = parity_of({}, gaps, matches, "float32")
    in_bfloat16 = parity_of({}, gaps, matches, "bfloat16")
    assert not in_float32["passed"]
    assert in_bfloat16["passed"]
    assert in_bfloat16["threshold"] == {
        "max_logprob_diff": parity_tolerances.DEFAULTS["bfloat16"].max_logprob_diff,
        "max_token_mismatch_rate": parity_tolerances.DEFAULTS["bfloat16"].max_token_mismatch_rate,
        "dtype": "bfloat16"}


def test_a_suites_own_tolerance_holds_in_every_dtype():
    gaps, matches = [0.2, 0.01, 0.0, 0.05], [True, True, True, True]
    for dtype in parity_tolerances.DEFAULTS:
        strict = parity_of({"max_logprob_diff": 0.1}, gaps, matches, dtype)
        assert not strict["passed"], dtype
        assert strict["threshold"]["max_logprob_diff"] == 0.1
    # A mismatch rate of 0 set by the suite is kept, not taken for "unset".
    one_differs = parity_of({"max_token_mismatch_rate": 0.0}, [0.0] * 4, [True, True, True, False], "bfloat16")
    assert not one_differs["passed"]
    assert one_differs["threshold"]["max_token_mismatch_rate"] == 0.0


def test_a_wrong_adapter_fails_in_every_dtype():
    # bench/results/parity_dtypes.json: answers judged against another adapter's reference gap by
    # several nats and differ in most examples.
    for dtype in parity_tolerances.DEFAULTS:
        assert not parity_of({}, [3.0, 2.5, 4.0, 1.5], [False, False, True, False], dtype)["passed"], dtype
