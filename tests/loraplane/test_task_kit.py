"""The task kit: trained adapters that measurably solve their task, bad ones that
measurably do not, standard files, and a cache that really is reused."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devkit.task_kit import ADAPTERS, SUITE_SIZE, TASKS, TaskKit, build_task_kit
from tests.conftest import KIT_BASE as BASE_NAME
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


@pytest.fixture(scope="module")
def kit(task_kit) -> TaskKit:
    """The session's kit, which the evaluation tests use too: trained once per checkout."""
    return task_kit


def exact_match(kit: TaskKit, model: str, suite: str) -> float:
    return kit.report["exact_match"][model][suite]


def test_base_knows_the_format_but_not_the_tasks(kit):
    for task in TASKS:
        assert exact_match(kit, "base", task) <= 0.1, kit.report["exact_match"]
        # The copy task it was trained on: shows a score of 0 is not a broken model.
        assert exact_match(kit, "base_on_copy", task) >= 0.9, kit.report["exact_match"]


def test_good_adapters_solve_their_own_task(kit):
    assert exact_match(kit, "digits_to_words", "digits_to_words") >= 0.9
    assert exact_match(kit, "digits_to_words_v2", "digits_to_words") >= 0.9
    assert exact_match(kit, "reverse_words", "reverse_words") >= 0.9


def test_bad_adapters_fail_the_digits_task(kit):
    assert exact_match(kit, "reverse_words", "digits_to_words") <= 0.2
    assert exact_match(kit, "digits_to_words_noisy", "digits_to_words") <= 0.3


def test_accuracies_hold_when_measured_again_one_prompt_at_a_time(kit):
    """Not the kit's own evaluation: a plain per-prompt greedy loop, so a bug in
    the report's measurement cannot pass unnoticed."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(kit.base_dir)
    rows = kit.suites["digits_to_words"][:16]  # half the suite: its adapters are right on all or none

    def accuracy(adapter: str) -> float:
        base = AutoModelForCausalLM.from_pretrained(kit.base_dir, dtype=torch.float32)
        model = PeftModel.from_pretrained(base, kit.adapters[adapter]).eval()
        correct = 0
        for row in rows:
            ids = tokenizer(row["prompt"], return_tensors="pt")["input_ids"]
            with torch.no_grad():
                out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                     max_new_tokens=8, do_sample=False,
                                     pad_token_id=tokenizer.pad_token_id)
            text = tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
            correct += text.strip() == row["reference"].strip()
        return correct / len(rows)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert accuracy("digits_to_words") >= 0.9
        assert accuracy("digits_to_words_noisy") <= 0.3
    finally:
        torch.set_num_threads(threads)


def test_suites_are_held_out_rows_of_the_right_shape(kit):
    assert set(kit.suites) == set(TASKS)
    prompts = {task: [row["prompt"] for row in rows] for task, rows in kit.suites.items()}
    for task, rows in kit.suites.items():
        assert len(rows) == SUITE_SIZE
        assert len(set(prompts[task])) == SUITE_SIZE
        for row in rows:
            assert set(row) == {"prompt", "reference"}
            assert row["prompt"].endswith(" =>") and row["reference"].startswith(" ")
    assert not set(prompts["digits_to_words"]) & set(prompts["reverse_words"])
    for row in kit.suites["digits_to_words"]:
        digits = row["prompt"].removeprefix("digits: ").removesuffix(" =>").split()
        assert 2 <= len(digits) <= 5
        assert row["reference"] == " " + " ".join(NUMBER_WORDS[int(d)] for d in digits)
    for row in kit.suites["reverse_words"]:
        words = row["prompt"].removeprefix("reverse: ").removesuffix(" =>").split()
        assert 2 <= len(words) <= 4 and len(set(words)) == len(words)
        assert row["reference"] == " " + " ".join(reversed(words))


def test_training_never_draws_a_suite_prompt(kit):
    import random

    from devkit import task_kit

    suites, validation, held_out = task_kit._make_suites(0)
    assert suites == kit.suites
    suite_prompts = {row["prompt"] for rows in suites.values() for row in rows}
    validation_prompts = {task_kit._prompt(task, items)
                          for task, rows in validation.items() for items in rows}
    assert not suite_prompts & validation_prompts
    assert held_out == suite_prompts | validation_prompts
    pairs = task_kit._pairs(TASKS, task_kit._answer, random.Random(0), held_out)
    drawn = {next(pairs)[0] for _ in range(20000)}
    assert not drawn & held_out
    # The filter had work to do: there are only a hundred two-digit prompts.
    assert any(p.startswith("digits: ") and len(p.split()) == 4 for p in suite_prompts)


def test_base_is_a_standard_float32_llama_with_its_tokenizer(kit):
    config = json.loads((kit.base_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["dtype"] == "float32"
    assert config["hidden_size"] // config["num_attention_heads"] == 32
    tokenizer_config = json.loads((kit.base_dir / "tokenizer_config.json").read_text())
    assert tokenizer_config["tokenizer_class"] == "PreTrainedTokenizerFast"
    specials = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}
    assert {key: tokenizer_config[key] for key in specials} == specials
    assert (kit.base_dir / "model.safetensors").is_file()
    assert (kit.base_dir / "tokenizer.json").is_file()


def test_adapters_are_plain_peft_lora(kit):
    assert set(kit.adapters) == set(ADAPTERS) == {
        "digits_to_words", "digits_to_words_v2", "reverse_words", "digits_to_words_noisy"}
    for name, path in kit.adapters.items():
        assert sorted(p.name for p in path.iterdir()) == ["adapter_config.json",
                                                          "adapter_model.safetensors"], name
        config = json.loads((path / "adapter_config.json").read_text())
        assert config["base_model_name_or_path"] == BASE_NAME
        assert config["peft_type"] == "LORA" and config["r"] == 8 and config["lora_alpha"] == 16
        assert config["target_modules"] == sorted(config["target_modules"])
        assert config["bias"] == "none" and not config["use_dora"] and not config["use_rslora"]
        assert not config["modules_to_save"]
        assert not config.get("rank_pattern") and not config.get("alpha_pattern")


def test_same_task_adapters_differ_in_bytes_not_config(kit):
    def read(name: str, file: str) -> bytes:
        return (kit.adapters[name] / file).read_bytes()

    assert read("digits_to_words", "adapter_model.safetensors") \
        != read("digits_to_words_v2", "adapter_model.safetensors")
    assert read("digits_to_words", "adapter_model.safetensors") \
        != read("digits_to_words_noisy", "adapter_model.safetensors")
    for other in ("digits_to_words_v2", "digits_to_words_noisy", "reverse_words"):
        assert read(other, "adapter_config.json") == read("digits_to_words", "adapter_config.json")


def test_everything_is_readable_by_other_users(kit):
    for path in [kit.root, *kit.root.rglob("*")]:
        mode = path.stat().st_mode & 0o777
        assert mode == (0o755 if path.is_dir() else 0o644), path


def test_a_second_build_reuses_the_kit(kit):
    before = {path: path.stat().st_mtime_ns for path in kit.root.rglob("*")}
    started = time.perf_counter()
    again = build_task_kit(kit.root, base_model_name=BASE_NAME)
    assert time.perf_counter() - started < 1.0
    assert again == kit
    assert {path: path.stat().st_mtime_ns for path in kit.root.rglob("*")} == before
    assert not [p for p in kit.root.parent.iterdir() if p.name.startswith(".kit.tmp-")]


def test_other_arguments_do_not_reuse_the_kit(kit):
    with pytest.raises(FileExistsError):
        build_task_kit(kit.root, base_model_name=BASE_NAME, seed=1)
    with pytest.raises(FileExistsError):
        build_task_kit(kit.root, base_model_name="another-name")


def test_command_line_prints_the_report_of_a_built_kit(kit):
    result = subprocess.run(
        [sys.executable, "-m", "devkit.task_kit", str(kit.root), "--base-model-name", BASE_NAME],
        check=False, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == kit.report


def test_module_imports_without_torch():
    code = ("import sys, devkit.task_kit; "
            "assert not {'torch', 'transformers', 'peft', 'tokenizers'} & set(sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True,
                            text=True, cwd=Path(__file__).parents[2], timeout=60)
    assert result.returncode == 0, result.stderr
