"""A tiny base model and LoRA adapters that really learned something, built offline.

tiny_model's adapters are random weights: fine for checking that uploads, loading
and routing work, useless for checking that an evaluation tells a good adapter from
a bad one. This kit trains, in a minute or so on a CPU, a tiny Llama base that knows
a prompt format but not the tasks, adapters that solve the tasks, and adapters
that do not (one with noise added, and the other task's adapter), together with
held-out suites and the accuracy transformers + PEFT measure on them. A server
evaluation (vLLM) can then be checked against known numbers.

The two tasks share the prompt shape "<task>: <items> =>" and a reference that
starts with a space, e.g. "digits: 3 7 2 =>" -> " three seven two" and
"reverse: cat dog sun =>" -> " sun dog cat". The byte-level pre-tokenizer splits
before every space, so prompt and reference never share a token and a server that
tokenizes the prompt alone sees the very tokens the model was trained on.

The artifacts are plain HF and PEFT formats (see tiny_model). torch, transformers,
peft and tokenizers are imported inside the functions: the server install lacks
them and must still be able to import this module.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from devkit.tiny_model import (
    TinyLlamaSpec,
    _finish_adapter_config,
    _llama_config,
    _make_files_readable,
    _make_temp_dir,
    _name_tokenizer_class_portably,
    _synthetic_corpus,
    _train_tokenizer,
)

__all__ = ["ADAPTERS", "SUITE_SIZE", "TASKS", "TaskKit", "build_task_kit"]

# Written last into a finished kit; holds the arguments and the report. Bump
# _RECIPE whenever what a kit contains changes, so an old cache is not reused.
_MARKER = "task_kit.json"
_SUITES = "suites.json"
_RECIPE = 1

TASKS = ("digits_to_words", "reverse_words")
SUITE_SIZE = 32
# A 512-token vocabulary is enough for every task word to be a single token, and
# keeps the output layer (much of the compute at this size) small. Four layers,
# not two: with two, whether copying by position (which repeated digits need)
# is learnt within a thousand steps depends on the seed, and adapters on such a
# base miss the 0.9 mark; four learn it in a few hundred steps on every seed tried.
_SPEC = TinyLlamaSpec(vocab_size=512, num_hidden_layers=4)

_PREFIX = {"digits_to_words": "digits", "reverse_words": "reverse"}
_NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
# The number words are among them so that the base, copying reverse prompts,
# learns to read and write them: a digits adapter then only has to map digits to
# known words. Output tokens the base never produced take rank-8 LoRA far longer.
_WORDS = (
    "cat", "dog", "sun", "moon", "tree", "fish", "bird", "star", "rain", "snow",
    "road", "ship", "cake", "milk", "book", "door", "lamp", "king", "ring", "frog",
    *_NUMBER_WORDS,
)


@dataclass(frozen=True)
class _Training:
    """How long a model trains: cycles of warmup then cosine decay (the decay is
    what brings the loss down), repeated while a validation check fails, since
    how many steps a model needs varies with the seed. The check: every answer
    right under teacher forcing (exactly greedy exact match) and a mean loss low
    enough that small numeric differences on a server flip no argmax."""

    lr: float
    cycle_steps: int
    max_cycles: int = 3
    batch_size: int = 32
    warmup: int = 30
    target_loss: float = 0.02


# Every projection: at rank 8 an adapter must change both where attention looks
# (reverse) and what a token turns into (digit to word), and at this size the
# extra modules cost little time.
_TARGET_MODULES = ("down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj")
_BASE_TRAINING = _Training(lr=1e-3, cycle_steps=500)
_ADAPTER_TRAINING = _Training(lr=5e-3, cycle_steps=150)
_VALIDATION_SIZE = 64  # rows per task, disjoint from the suites and from training


@dataclass(frozen=True)
class _AdapterRecipe:
    task: str
    seed: int


# name -> how it is trained. The two digits adapters differ only in seed, so
# they solve the same task with different bytes.
_TRAINED_ADAPTERS = {
    "digits_to_words": _AdapterRecipe("digits_to_words", seed=1),
    "digits_to_words_v2": _AdapterRecipe("digits_to_words", seed=2),
    "reverse_words": _AdapterRecipe("reverse_words", seed=1),
}
# The good digits adapter with noise added; noise std is this many times each
# tensor's own std, enough that accuracy collapses while the file stays sane.
_NOISY = "digits_to_words_noisy"
_NOISE_SCALE = 2.0
ADAPTERS = (*_TRAINED_ADAPTERS, _NOISY)


@dataclass(frozen=True)
class TaskKit:
    root: Path
    base_dir: Path
    adapters: dict[str, Path]
    suites: dict[str, list[dict[str, str]]]
    report: dict


def build_task_kit(
    root: Path, *, base_model_name: str = "tiny-task-llama", seed: int = 0
) -> TaskKit:
    """Build the kit in root, or return it at once if root already holds it.

    Training takes a minute or so, so a kit is reused whenever root holds one
    built with the same arguments; one built with others is an error rather than
    silently replaced. The build goes to a temp dir beside root and is renamed
    in, so root is either absent or complete, even after a crash or with
    concurrent builders.
    """
    root = Path(root)
    wanted = {"base_model_name": base_model_name, "seed": seed, "recipe": _RECIPE}
    if (root / _MARKER).is_file():
        return _load_kit(root, wanted)
    if root.exists() and any(root.iterdir()):  # fail now, not after a minute of training
        raise FileExistsError(f"{root} exists and is not a task kit")
    tmp = _make_temp_dir(root)
    try:
        report = _build(tmp, base_model_name, seed)
        (tmp / _MARKER).write_text(
            json.dumps({"args": wanted, "report": report}, indent=2, sort_keys=True) + "\n")
        _make_files_readable(tmp)
        try:
            os.replace(tmp, root)  # succeeds only onto a missing or empty dir
        except OSError:
            if not (root / _MARKER).is_file():  # not a concurrent builder's result
                raise FileExistsError(f"{root} exists and is not a task kit") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return _load_kit(root, wanted)


def _load_kit(root: Path, wanted: dict) -> TaskKit:
    marker = json.loads((root / _MARKER).read_text())
    if marker["args"] != wanted:
        raise FileExistsError(f"{root} holds a task kit built with {marker['args']}, not {wanted}")
    suites = json.loads((root / _SUITES).read_text())
    return TaskKit(
        root=root,
        base_dir=root / "base",
        adapters={name: root / "adapters" / name for name in ADAPTERS},
        suites=suites,
        report=marker["report"],
    )


# ---------------------------------------------------------------- task data


# Item counts of the suites, and wider ones for training: at the shortest
# length there are few distinct prompts (a hundred with two digits, a quarter of
# them held out), which a model learns by heart instead of by rule unless that
# length also lies inside what it trains on.
_LENGTHS = {"digits_to_words": (2, 5), "reverse_words": (2, 4)}
_TRAINING_LENGTHS = {"digits_to_words": (1, 6), "reverse_words": (1, 5)}


def _sample_items(task: str, rng: random.Random, lengths: dict = _LENGTHS) -> tuple[str, ...]:
    count = rng.randint(*lengths[task])
    if task == "digits_to_words":
        return tuple(str(rng.randrange(10)) for _ in range(count))
    # Distinct words: a list that reads the same reversed would let a model
    # that merely copies score on the reverse task.
    return tuple(rng.sample(_WORDS, count))


def _prompt(task: str, items: tuple[str, ...]) -> str:
    return f"{_PREFIX[task]}: {' '.join(items)} =>"


def _answer(task: str, items: tuple[str, ...]) -> str:
    if task == "digits_to_words":
        return " " + " ".join(_NUMBER_WORDS[int(d)] for d in items)
    return " " + " ".join(reversed(items))


def _copy(task: str, items: tuple[str, ...]) -> str:
    """What the base learns: the prompt format and when to stop, not the task."""
    return " " + " ".join(items)


def _copy_rows(task: str, rows: list[dict[str, str]]) -> list[dict[str, str]]:
    items = [tuple(row["prompt"].split(": ", 1)[1].removesuffix(" =>").split()) for row in rows]
    return [{"prompt": row["prompt"], "reference": _copy(task, it)} for row, it in zip(rows, items, strict=True)]


def _make_suites(seed: int) -> tuple[dict[str, list[dict[str, str]]],
                                     dict[str, list[tuple[str, ...]]], set[str]]:
    """Per task, the suite rows and the validation items, and all their prompts,
    which training never draws."""
    suites: dict[str, list[dict[str, str]]] = {}
    validation: dict[str, list[tuple[str, ...]]] = {}
    held_out: set[str] = set()
    for task in TASKS:
        rng = random.Random(f"suite/{seed}/{task}")
        drawn: list[tuple[str, ...]] = []
        while len(drawn) < SUITE_SIZE + _VALIDATION_SIZE:
            items = _sample_items(task, rng)
            if items not in drawn:
                drawn.append(items)
        suites[task] = [{"prompt": _prompt(task, items), "reference": _answer(task, items)}
                        for items in drawn[:SUITE_SIZE]]
        validation[task] = drawn[SUITE_SIZE:]
        held_out.update(_prompt(task, items) for items in drawn)
    return suites, validation, held_out


def _pairs(tasks: tuple[str, ...], answer: Callable, rng: random.Random,
           held_out: set[str]) -> Iterator[tuple[str, str]]:
    """An endless stream of (prompt, reference): fresh samples generalize better
    than epochs over a small fixed set, and the stream is just as deterministic."""
    while True:
        task = rng.choice(tasks)
        items = _sample_items(task, rng, _TRAINING_LENGTHS)
        prompt = _prompt(task, items)
        if prompt not in held_out:
            yield prompt, answer(task, items)


def _tokenizer_corpus(seed: int) -> list[str]:
    """Task lines, so every task word becomes a single token, then ordinary text,
    so the rest of the vocabulary looks like a normal tokenizer's."""
    rng = random.Random(f"tokenizer/{seed}")
    lines = []
    for _ in range(2000):
        for task in TASKS:
            items = _sample_items(task, rng)
            lines.append(_prompt(task, items) + _answer(task, items) + _copy(task, items))
    return lines + _synthetic_corpus(seed, sentences=1000)


# ---------------------------------------------------------------- training


def _build(out: Path, base_model_name: str, seed: int) -> dict:
    import torch
    from transformers.utils import logging as hf_logging

    started = time.perf_counter()
    seconds: dict[str, float] = {}
    threads = torch.get_num_threads()
    # One thread: the model is too small to gain from more, and the machines
    # running tests have other work to do.
    torch.set_num_threads(1)
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a dozen loads and saves would each draw one
    try:
        with torch.random.fork_rng(devices=[]):  # leave the caller's RNG alone
            suites, validation, held_out = _make_suites(seed)
            (out / _SUITES).write_text(json.dumps(suites, indent=2) + "\n")

            clock = time.perf_counter()
            tokenizer = _train_tokenizer(_SPEC, seed, _tokenizer_corpus(seed))
            _check_prompt_boundary(tokenizer, suites)
            seconds["tokenizer"] = time.perf_counter() - clock

            base_dir = out / "base"
            clock = time.perf_counter()
            training = {"base": _train_base(base_dir, tokenizer, seed, validation, held_out)}
            seconds["base"] = time.perf_counter() - clock

            adapters_dir = out / "adapters"
            for name, recipe in _TRAINED_ADAPTERS.items():
                clock = time.perf_counter()
                training[name] = _train_adapter(base_dir, adapters_dir / name, tokenizer, recipe,
                                                seed, validation, held_out, base_model_name)
                seconds[name] = time.perf_counter() - clock

            clock = time.perf_counter()
            _add_noise(adapters_dir / "digits_to_words", adapters_dir / _NOISY, seed)
            seconds[_NOISY] = time.perf_counter() - clock

            clock = time.perf_counter()
            exact_match = _evaluate_all(base_dir, adapters_dir, tokenizer, suites)
            seconds["evaluation"] = time.perf_counter() - clock
    finally:
        torch.set_num_threads(threads)
        if bars:
            hf_logging.enable_progress_bar()
    seconds["total"] = time.perf_counter() - started
    return {
        "seconds": {name: round(value, 2) for name, value in seconds.items()},
        "exact_match": exact_match,
        "training": training,
        "recipe": {
            "base": asdict(_BASE_TRAINING),
            "adapters": {**asdict(_ADAPTER_TRAINING), "r": 8, "lora_alpha": 16,
                         "target_modules": list(_TARGET_MODULES)},
            "validation_rows_per_task": _VALIDATION_SIZE,
            "noise_scale": _NOISE_SCALE,
        },
    }


def _check_prompt_boundary(tokenizer, suites: dict) -> None:
    """Training encodes prompt and reference apart; a server encodes the prompt
    alone and generates the rest. Both only agree with encoding the whole text
    if no token spans the boundary."""
    for rows in suites.values():
        for row in rows:
            whole = tokenizer(row["prompt"] + row["reference"])["input_ids"]
            parts = (tokenizer(row["prompt"])["input_ids"]
                     + tokenizer(row["reference"], add_special_tokens=False)["input_ids"])
            if whole != parts:
                raise RuntimeError(f"a token spans the prompt/reference boundary in {row}")


def _collate(tokenizer, pairs: list[tuple[str, str]], cache: dict[str, list[int]]):
    """(input_ids, attention_mask, labels); loss only on the reference and eos,
    since a server is never asked to produce the prompt."""
    import torch

    def encode(text: str, special: bool) -> list[int]:
        if text not in cache:
            cache[text] = tokenizer(text, add_special_tokens=special)["input_ids"]
        return cache[text]

    sequences, labels = [], []
    for prompt, reference in pairs:
        p = encode(prompt, True)
        r = encode(reference, False) + [tokenizer.eos_token_id]
        sequences.append(p + r)
        labels.append([-100] * len(p) + r)
    width = max(map(len, sequences))
    ids = torch.full((len(pairs), width), tokenizer.pad_token_id)
    mask = torch.zeros((len(pairs), width), dtype=torch.long)
    target = torch.full((len(pairs), width), -100)
    for i, (seq, lab) in enumerate(zip(sequences, labels, strict=True)):
        ids[i, : len(seq)] = torch.tensor(seq)
        mask[i, : len(seq)] = 1
        target[i, : len(lab)] = torch.tensor(lab)
    return ids, mask, target


def _batches(tokenizer, pairs: Iterator[tuple[str, str]], batch_size: int):
    cache: dict[str, list[int]] = {}
    while True:
        yield _collate(tokenizer, [next(pairs) for _ in range(batch_size)], cache)


def _validate(model, batch) -> tuple[float, float]:
    """(exact match, loss) under teacher forcing: a row is right when the argmax
    at every answer position, eos included, is the reference token, which is
    when greedy generation would produce exactly the reference and stop."""
    import torch

    ids, mask, labels = batch
    model.eval()
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
    model.train()
    predicted, wanted = out.logits[:, :-1].argmax(-1), labels[:, 1:]
    right = ((predicted == wanted) | (wanted == -100)).all(dim=1)
    return right.float().mean().item(), out.loss.item()


def _train_loop(model, batches, validation_batch, training: _Training) -> dict:
    """AdamW in cycles (see _Training); returns what the report shows of it."""
    import math

    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=training.lr, weight_decay=0.0)

    def lr_at(step: int) -> float:
        if step < training.warmup:
            return training.lr * (step + 1) / training.warmup
        progress = (step - training.warmup) / (training.cycle_steps - training.warmup)
        return training.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))

    model.train()
    recent: list[float] = []
    for cycle in range(1, training.max_cycles + 1):  # noqa: B007 (read after the loop: cycles run)
        for step in range(training.cycle_steps):
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step)
            ids, mask, labels = next(batches)
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            recent = (recent + [loss.item()])[-20:]
        exact, val_loss = _validate(model, validation_batch)
        if exact == 1.0 and val_loss < training.target_loss:
            break
    model.eval()
    return {"cycles": cycle, "steps": cycle * training.cycle_steps,
            "train_loss": round(sum(recent) / len(recent), 5),
            "validation_exact_match": round(exact, 4), "validation_loss": round(val_loss, 5)}


def _train_base(base_dir: Path, tokenizer, seed: int, validation: dict, held_out: set[str]) -> dict:
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    # transformers' wrapped .to() is typed as if unbound: mypy wants the model as its argument.
    model = LlamaForCausalLM(_llama_config(_SPEC, tokenizer)).to(torch.float32)  # type: ignore[arg-type]
    pairs = _pairs(TASKS, _copy, random.Random(f"base/{seed}"), held_out)
    check = _collate(tokenizer, [(_prompt(task, items), _copy(task, items))
                                 for task in TASKS for items in validation[task]], {})
    result = _train_loop(model, _batches(tokenizer, pairs, _BASE_TRAINING.batch_size), check,
                         _BASE_TRAINING)
    base_dir.mkdir()
    model.save_pretrained(base_dir, safe_serialization=True)
    tokenizer.save_pretrained(base_dir)
    _name_tokenizer_class_portably(base_dir)
    return result


def _load_base(base_dir: Path):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32, device_map="cpu")


def _train_adapter(base_dir: Path, out_dir: Path, tokenizer, recipe: _AdapterRecipe, seed: int,
                   validation: dict, held_out: set[str], base_model_name: str) -> dict:
    import torch
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=8,
        lora_alpha=16,
        lora_dropout=0.0,
        target_modules=list(_TARGET_MODULES),
        bias="none",
        task_type="CAUSAL_LM",
    )
    torch.manual_seed(1000 * seed + recipe.seed)  # LoRA A's initial values
    model = get_peft_model(_load_base(base_dir), config)
    rng = random.Random(f"adapter/{seed}/{recipe.task}/{recipe.seed}")
    pairs = _pairs((recipe.task,), _answer, rng, held_out)
    batches = _batches(tokenizer, pairs, _ADAPTER_TRAINING.batch_size)
    check = _collate(tokenizer, [(_prompt(recipe.task, items), _answer(recipe.task, items))
                                 for items in validation[recipe.task]], {})
    result = _train_loop(model, batches, check, _ADAPTER_TRAINING)
    out_dir.parent.mkdir(exist_ok=True)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    _finish_adapter_config(out_dir, base_model_name)
    # PEFT's model card names the base by the temp build path, gone after the rename.
    (out_dir / "README.md").unlink(missing_ok=True)
    return result


def _add_noise(good_dir: Path, out_dir: Path, seed: int) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    weights = load_file(good_dir / "adapter_model.safetensors")
    generator = torch.Generator().manual_seed(seed)
    noisy = {}
    for name in sorted(weights):
        tensor = weights[name]
        noise = torch.randn(tensor.shape, generator=generator, dtype=tensor.dtype)
        noisy[name] = (tensor + _NOISE_SCALE * tensor.std() * noise).contiguous()
    out_dir.mkdir()
    save_file(noisy, out_dir / "adapter_model.safetensors", metadata={"format": "pt"})
    shutil.copyfile(good_dir / "adapter_config.json", out_dir / "adapter_config.json")


# ---------------------------------------------------------------- evaluation


def _evaluate_all(base_dir: Path, adapters_dir: Path, tokenizer, suites: dict) -> dict:
    """Exact match of the base and of every saved adapter (as loaded from disk,
    so what is measured is what a server gets) on every suite."""
    from peft import PeftModel

    base = _load_base(base_dir)
    result = {"base": {task: _exact_match(base, tokenizer, rows) for task, rows in suites.items()},
              # Not a suite: shows the base did learn the format it should know.
              "base_on_copy": {task: _exact_match(base, tokenizer, _copy_rows(task, rows))
                               for task, rows in suites.items()}}
    for name in ADAPTERS:
        model = PeftModel.from_pretrained(_load_base(base_dir), adapters_dir / name)
        model.eval()
        result[name] = {task: _exact_match(model, tokenizer, rows) for task, rows in suites.items()}
    return result


def _exact_match(model, tokenizer, rows: list[dict[str, str]]) -> float:
    """Greedy generation until eos, continuation stripped vs reference stripped.

    Rows are batched by prompt length, so no padding can change the numbers.
    """
    import torch

    eos = tokenizer.eos_token_id
    max_new = max(len(tokenizer(row["reference"], add_special_tokens=False)["input_ids"])
                  for row in rows) + 2
    groups: dict[int, list[tuple[list[int], str]]] = {}
    for row in rows:
        ids = tokenizer(row["prompt"])["input_ids"]
        groups.setdefault(len(ids), []).append((ids, row["reference"]))
    correct = 0
    with torch.no_grad():
        for length, group in groups.items():
            ids = torch.tensor([ids for ids, _ in group])
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                 max_new_tokens=max_new, do_sample=False,
                                 eos_token_id=eos, pad_token_id=tokenizer.pad_token_id)
            for generated, (_, reference) in zip(out[:, length:].tolist(), group, strict=True):
                if eos in generated:
                    generated = generated[: generated.index(eos)]
                text = tokenizer.decode(generated, skip_special_tokens=True)
                correct += text.strip() == reference.strip()
    return round(correct / len(rows), 4)


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m devkit.task_kit",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("root", type=Path, help="where to build the kit, or find a built one")
    parser.add_argument("--base-model-name", default="tiny-task-llama",
                        help="the base's name as adapter_config.json gives it")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    kit = build_task_kit(args.root, base_model_name=args.base_model_name, seed=args.seed)
    print(json.dumps(kit.report, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
