"""Versions waiting on the same base are evaluated together in one engine, with the same results
as one after another."""

from __future__ import annotations

import pytest

from devkit.pipeline_steps import create_suite, upload_dir
from tests.support.evals import request_evaluation, wait_finished, wait_idle

ARTIFACTS = ("digits_to_words", "digits_to_words_v2", "reverse_words", "digits_to_words_noisy")
ROWS = 16  # of the suite's 32: each version is evaluated twice, and half of them tell the same
# Quality metrics only: serving measures time, which no two runs share.
METRICS = {"exact_match": {"min": 0.8}, "contains": {"min": 0.8},
           "reference_loglik": {"min_margin": 5.0}, "parity": {"max_logprob_diff": 1e-3}}


def test_four_versions_together_match_four_one_after_another(
        admin, uploader, kit_base, task_kit, engine, eval_worker):
    rows = task_kit.suites["digits_to_words"][:ROWS]
    create_suite(admin, "digits-together", kit_base, rows, METRICS)
    create_suite(admin, "digits-apart", kit_base, rows, METRICS)
    versions = [upload_dir(uploader, f"acme/multi-{i}", task_kit.adapters[a]) for i, a in enumerate(ARTIFACTS)]
    wait_idle(engine, kit_base)

    eval_worker.kill()  # queue all four before any worker looks, as when uploads arrive together
    together_ids = [request_evaluation(uploader, v, "digits-together")["id"] for v in versions]
    eval_worker.restart()
    together = [wait_finished(uploader, i, examples_limit=200) for i in together_ids]
    apart = [wait_finished(uploader, request_evaluation(uploader, v, "digits-apart")["id"],
                           examples_limit=200) for v in versions]

    # One batch: one claim started them all, and they share the batch's engine timings.
    assert len({e["started_at"] for e in together}) == 1
    assert len({e["timings"]["adapter_generation_s"] for e in together}) == 1
    assert len({e["timings"]["adapter_generation_s"] for e in apart}) == 4
    assert [e["state"] for e in together] == ["passed", "passed", "failed", "failed"]
    for one, other in zip(together, apart):
        assert one["state"] == other["state"] and one["failing_metrics"] == other["failing_metrics"]
        for name in ("exact_match", "contains"):
            assert one["metrics"][name]["value"] == other["metrics"][name]["value"]
            assert one["metrics"][name]["base"] == other["metrics"][name]["base"]
        for side in ("value", "base"):
            assert one["metrics"]["reference_loglik"][side] == pytest.approx(
                other["metrics"]["reference_loglik"][side], abs=1e-4)
        assert one["metrics"]["parity"]["passed"] and other["metrics"]["parity"]["passed"]
        assert [x["output"] for x in one["examples"]["items"]] == \
               [x["output"] for x in other["examples"]["items"]]
