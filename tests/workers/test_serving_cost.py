"""The serving metric compares an adapter with the base like for like: the same prompts in
bursts of the same concurrency, each generating the same number of tokens, alternating base,
adapter, adapter, base on one engine.

The band: vLLM 0.32's CPU build runs every LoRA request through its LoRA layers, which costs the
kit's tiny base 25-40% of its throughput whatever the adapter targets (measured on a quiet
machine: 0.60 to 0.75 for q_proj alone, q_proj and v_proj, and all linear layers), where comparing
every adapter at once against the base alone, the old measure, read about 40. The band is wide
because the suite's other lane shares the two cores, and work there weighs on the LoRA path most:
with it busy the ratio has read 1.24 once, and 0.29 in all three rounds once (a fresh clone, with
the other lane deriving and building family models in torch). A second vLLM engine on the cores
read 0.24 in every round, so the measurement holds the suite's CPU lock (tests/support/cpu_lock.py)
against the family-parity engines. So an adapter vLLM serves in full reads within [0.2, 1.5] on
two shared cores, nowhere near the old measure's 40. The metric is the median of three rounds'
ratios, so one disturbed round is outvoted."""

from __future__ import annotations

import statistics

import pytest

from devkit.pipeline_steps import create_suite, upload_dir
from tests.support import cpu_lock
from tests.support.evals import request_evaluation, wait_finished

PROMPTS, MAX_TOKENS, ROUNDS = 16, 32, 3
BAND = (0.2, 1.5)


@pytest.fixture(scope="module")
def serving_suite(admin, kit_base, task_kit) -> str:
    rows = task_kit.suites["digits_to_words"][:PROMPTS]
    return create_suite(admin, "serving-cost", kit_base, rows,
                        {"serving": {"min_throughput_ratio": 0.05, "rounds": ROUNDS}},
                        max_tokens=MAX_TOKENS)["name"]


def test_an_adapter_and_the_base_are_measured_with_the_same_bursts(uploader, serving_suite, task_kit,
                                                                   eval_worker, tmp_path_factory):
    version = upload_dir(uploader, "acme/serving-cost", task_kit.adapters["digits_to_words"])

    with cpu_lock.measuring_alone(tmp_path_factory):
        result = wait_finished(uploader, request_evaluation(uploader, version, serving_suite)["id"])

    serving = result["metrics"]["serving"]
    assert serving["order"] == "ABBA" * ROUNDS and serving["method"] == "abba_bursts"
    assert (serving["prompts"], serving["concurrency"], serving["max_tokens"]) == (PROMPTS, PROMPTS, MAX_TOKENS)
    assert len(serving["round_ratios"]) == ROUNDS
    assert serving["value"] == pytest.approx(statistics.median(serving["round_ratios"]))
    assert serving["ttft_ratio"] == pytest.approx(serving["ttft_ms"] / serving["base_ttft_ms"])
    assert BAND[0] <= serving["value"] <= BAND[1], serving["detail"]
    assert "serving_s" in result["timings"]
