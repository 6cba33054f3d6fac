"""`loraplane suite create` and `loraplane eval run` against the registry and a real engine."""

from __future__ import annotations

import json

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from devkit.pipeline_steps import upload_dir
from registry.tables import EvalSuite
from tests.loraplane.test_cli import cli


def unwrapped(text: str) -> str:
    """The console wraps long lines; compare messages with the wrapping undone."""
    return " ".join(text.split())


def test_create_a_suite_then_evaluate_and_wait_for_the_verdict(
        registry, tokens, kit_base, task_kit, uploader, eval_worker, tmp_path):
    dataset = tmp_path / "digits.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in task_kit.suites["digits_to_words"][:8]))
    created = cli("suite", "create", "cli-digits", "--base-model", kit_base, "--dataset", str(dataset),
                  "--metrics", '{"exact_match": {"min": 0.8}, "parity": {}}', "--max-tokens", "16",
                  token=tokens["global_admin"], url=registry.url)
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["example_count"] == 8
    upload_dir(uploader, "acme/cli-digits", task_kit.adapters["digits_to_words"])

    passed = cli("eval", "run", "acme/cli-digits@1", "--suite", "cli-digits",
                 token=tokens["acme_uploader"], url=registry.url)
    assert passed.returncode == 0, passed.stderr
    assert "PASSED" in passed.stderr and "exact_match" in passed.stderr
    assert json.loads(passed.stdout)["state"] == "passed"

    upload_dir(uploader, "acme/cli-reverse", task_kit.adapters["reverse_words"])
    failed = cli("eval", "run", "acme/cli-reverse@1", "--suite", "cli-digits",
                 token=tokens["acme_uploader"], url=registry.url)
    assert failed.returncode == 1
    assert "FAILED" in failed.stderr and "FAIL" in failed.stderr

    shown = cli("eval", "show", str(json.loads(passed.stdout)["id"]), "--examples", "2",
                token=tokens["acme_reviewer"], url=registry.url)
    assert shown.returncode == 0, shown.stderr
    assert len(json.loads(shown.stdout)["examples"]["items"]) == 2


def test_a_bad_dataset_line_is_named_and_nothing_is_created(registry, tokens, kit_base, engine, tmp_path):
    dataset = tmp_path / "bad.jsonl"
    dataset.write_text('{"prompt": "a", "reference": "b"}\n{"prompt": "c"}\n')
    with Session(engine) as session:
        before = session.scalar(select(func.count()).select_from(EvalSuite))
    result = cli("suite", "create", "cli-bad", "--base-model", kit_base, "--dataset", str(dataset),
                 token=tokens["global_admin"], url=registry.url)
    assert result.returncode == 1
    assert f"{dataset}:2: each row needs \"prompt\" and \"reference\"" in unwrapped(result.stderr)
    with Session(engine) as session:
        assert session.scalar(select(func.count()).select_from(EvalSuite)) == before


def test_a_malformed_version_reference_is_explained(registry, tokens):
    result = cli("eval", "run", "acme/cli-digits", "--suite", "cli-digits",
                 token=tokens["acme_uploader"], url=registry.url)
    assert result.returncode == 1
    assert "expected a version like tenant/name@3, got 'acme/cli-digits'" in unwrapped(result.stderr)


def test_a_policy_set_from_the_cli_and_a_pair_evaluated_side_by_side(
        registry, tokens, kit_base, task_kit, uploader, eval_worker, tmp_path):
    dataset = tmp_path / "task.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in task_kit.suites["digits_to_words"][:8]))
    as_uploader = {"token": tokens["acme_uploader"], "url": registry.url}
    created = cli("suite", "create", "cli-task", "--tenant", "acme", "--base-model", kit_base, "--dataset",
                  str(dataset), "--metrics", '{"exact_match": {"min": 0.5}}', "--max-tokens", "16", **as_uploader)
    assert created.returncode == 0, created.stderr
    upload_dir(uploader, "acme/cli-pair", task_kit.adapters["digits_to_words"])
    upload_dir(uploader, "acme/cli-pair", task_kit.adapters["digits_to_words_noisy"])

    bad = cli("policy", "set", "acme/cli-pair", "--suite", "acme/cli-task", "--margin", "exact_match:0.1",
              **as_uploader)
    assert bad.returncode == 1 and "--margin 'exact_match:0.1' is not METRIC=VALUE" in unwrapped(bad.stderr)
    policy = cli("policy", "set", "acme/cli-pair", "--suite", "acme/cli-task", "--margin", "exact_match=0.1",
                 **as_uploader)
    assert policy.returncode == 0, policy.stderr
    shown = cli("policy", "show", "acme/cli-pair", token=tokens["acme_reviewer"], url=registry.url)
    assert json.loads(shown.stdout)["required_suites"] == ["acme/cli-task"]
    assert json.loads(shown.stdout)["effective_margins"]["exact_match"] == 0.1
    weaker = cli("policy", "set", "acme/cli-pair", "--suite", "acme/cli-task", "--margin", "exact_match=0.3",
                 **as_uploader)
    assert weaker.returncode == 0, weaker.stderr
    assert ("proposed, not in force: it weakens the policy (the challenger's margin on exact_match raised "
            "from 0.1 to 0.3)") in unwrapped(weaker.stderr)
    mine = cli("policy", "approve", "acme/cli-pair", "--yes", **as_uploader)
    assert mine.returncode == 1 and "role 'uploader' may not do this" in unwrapped(mine.stderr)
    withdrawn = cli("policy", "withdraw", "acme/cli-pair", token=tokens["acme_reviewer"], url=registry.url)
    assert withdrawn.returncode == 0, withdrawn.stderr
    assert json.loads(withdrawn.stdout)["proposed"] is None
    assert json.loads(withdrawn.stdout)["effective_margins"]["exact_match"] == 0.1

    compared = cli("eval", "run", "acme/cli-pair@2", "--suite", "acme/cli-task", "--against", "1", **as_uploader)

    assert compared.returncode == 1, compared.stderr  # the noisy version fails the suite itself
    table = unwrapped(compared.stderr)
    assert "acme/cli-pair@2 against acme/cli-pair@1 on acme/cli-task (one batch)" in table
    assert "│ exact_match │ 0 │ 1 │ -1 │" in table
    assert json.loads(compared.stdout)["pair"]["other_served_name"] == "acme/cli-pair@1"
