"""`loraplane demo`: the whole lifecycle, told against a running `loraplane up`.

An ML engineer pushes three adapters: one that turns digits into words, one that reverses words,
and a second version of the digits adapter that is broken (its weights carry noise, as a bad
retrain would). Workers evaluate each on vLLM; a reviewer approves the two good ones; the router
answers with them through the `openai` client; the broken one never reaches a node, and the
registry says why. Then the tenant brings its own suite, a retrained digits adapter is judged
beside the one in production, and its canary is promoted on live evidence (demo_delivery).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from devkit import demo_delivery
from devkit.stack.seed import DemoSetup
from loraplane_client.connection import ClientSettings, RegistryError, checked, connect
from loraplane_client.push import push
from loraplane_client.terminal import console, fail

EVALUATION_TIMEOUT_S = 900
SERVING_TIMEOUT_S = 180
QUERIES_PER_TASK = 3
# Kit suite rows from here on are used by neither the evaluation suite nor training.
FIRST_QUERY_ROW = 12


@dataclass(frozen=True)
class Story:
    kit_adapter: str
    adapter: str
    task: str
    good: bool


STORIES = (
    Story("digits_to_words", "digits", "digits_to_words", good=True),
    Story("reverse_words", "reverse", "reverse_words", good=True),
    Story("digits_to_words_noisy", "digits", "digits_to_words", good=False),  # becomes digits@2
)


@dataclass
class Outcome:
    evaluations: dict[str, dict] = field(default_factory=dict)
    served: dict[str, dict] = field(default_factory=dict)
    blocked: dict[str, dict] = field(default_factory=dict)
    delivery: dict[str, dict | None] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def run_demo(data_dir: Path) -> dict:
    setup = _load_setup(data_dir)
    _require_up(setup)
    kit_dir = Path(setup.kit_dir)
    suites = json.loads((kit_dir / "suites.json").read_text())
    uploader = connect(ClientSettings(url=setup.registry_url, token=setup.tokens["uploader"]))
    reviewer = connect(ClientSettings(url=setup.registry_url, token=setup.tokens["reviewer"]))
    outcome = Outcome()
    with uploader, reviewer:
        console.rule("1. push three adapters (ml-engineer)")
        versions = [_push(uploader, setup, kit_dir, story) for story in STORIES]
        console.rule(f"2. evaluate every version on vLLM (suite {setup.suite!r})")
        evaluations = _evaluate(uploader, setup, versions)
        _show_evaluations(uploader, evaluations, outcome)
        console.rule("3. promote: the uploader asks, the reviewer approves")
        for story, version in zip(STORIES, versions, strict=True):
            _promote(uploader, reviewer, setup, story, version, outcome)
    console.rule("4. query through the router with the openai client (demo-app)")
    _query(setup, [(s, v) for s, v in zip(STORIES, versions, strict=True) if s.good], suites, outcome)
    console.rule("5. the broken version never answers")
    for story, version in zip(STORIES, versions, strict=True):
        if not story.good:
            _show_blocked(setup, version, outcome)
    uploader = connect(ClientSettings(url=setup.registry_url, token=setup.tokens["uploader"]))
    reviewer = connect(ClientSettings(url=setup.registry_url, token=setup.tokens["reviewer"]))
    with uploader, reviewer:
        console.rule("6. the tenant's own suite: a new version judged beside the one in production")
        challenged = demo_delivery.challenge(uploader, setup, kit_dir, suites, outcome.problems)
        console.rule("7. a canary decided on live evidence")
        prompt = suites["digits_to_words"][FIRST_QUERY_ROW]["prompt"]
        outcome.delivery = {"challenger": challenged.get("comparison"),
                            "canary": demo_delivery.canary(uploader, reviewer, setup, challenged["version"],
                                                           prompt, outcome.problems)}
    return _summary(outcome)


def _load_setup(data_dir: Path) -> DemoSetup:
    path = data_dir / "demo.json"
    if not path.is_file():
        fail(f"{path} does not exist: `loraplane up` has not seeded the demo in {data_dir}",
             "Start it first with `./dev up` (or `loraplane up --data-dir DIR`), and pass the same "
             "--data-dir here.")
    return DemoSetup.load(path)


def _require_up(setup: DemoSetup) -> None:
    for name, url in (("registry", setup.registry_url + "/healthz"), ("router", setup.router_url + "/healthz")):
        try:
            httpx.get(url, timeout=5).raise_for_status()
        except httpx.HTTPError:
            fail(f"the {name} does not answer at {url}",
                 "Is `loraplane up` still running? Start it with `./dev up` in another shell.")


def _push(uploader: httpx.Client, setup: DemoSetup, kit_dir: Path, story: Story) -> dict:
    version, created = push(uploader, kit_dir / "adapters" / story.kit_adapter, setup.tenant, story.adapter)
    note = "" if created else " (already uploaded)"
    quality = "good" if story.good else "[red]broken: noise in its weights[/red]"
    console.print(f"{version['served_name']}  {story.task}, {quality}{note}")
    return version


def _evaluate(uploader: httpx.Client, setup: DemoSetup, versions: list[dict]) -> dict[str, dict]:
    """Uploads queue an evaluation of each suite the pool requires; wait for them to finish."""
    finished: dict[str, dict] = {}
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
               TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("evaluating", total=len(versions))
        deadline = time.monotonic() + EVALUATION_TIMEOUT_S
        while len(finished) < len(versions):
            states = []
            for version in versions:
                if version["served_name"] in finished:
                    continue
                latest = _latest_evaluation(uploader, setup, version)
                states.append(latest["state"])
                if latest["state"] in ("passed", "failed"):
                    finished[version["served_name"]] = latest
                    progress.advance(task)
            progress.update(task, description=f"evaluating ({', '.join(sorted(set(states))) or 'done'})")
            if time.monotonic() > deadline:
                fail(f"evaluations did not finish within {EVALUATION_TIMEOUT_S} s",
                     "See the worker's log in the data folder's logs/worker.log.")
            if len(finished) < len(versions):
                time.sleep(0.25)  # a local registry: asking often costs it little
    return finished


def _latest_evaluation(uploader: httpx.Client, setup: DemoSetup, version: dict) -> dict:
    path = f"/v1/adapters/{version['tenant']}/{version['adapter']}/versions/{version['number']}/evaluations"
    ours = [e for e in checked(uploader.get(path))["items"] if e["suite"] == setup.suite]
    if ours:
        return max(ours, key=lambda e: e["id"])
    return checked(uploader.post(path, json={"suite": setup.suite}))  # uploaded before the pool existed


def _show_evaluations(registry: httpx.Client, evaluations: dict[str, dict], outcome: Outcome) -> None:
    """One row per version: how many prompts of each task it answered exactly, then the gates'
    figures. The suite holds both tasks, so a good adapter answers its own half."""
    minimum = next(iter(evaluations.values()))["metrics"].get("exact_match", {}).get("threshold", {}).get("min")
    table = Table(caption=f"exact match: over both tasks' prompts, {minimum} needed; parity Δ: the "
                          "largest |logprob| difference from the merged weights")
    for column in ("version", "digits", "reverse", "exact match", "parity Δ", "result"):
        table.add_column(column, no_wrap=column == "version")
    for served_name, evaluation in evaluations.items():
        metrics = evaluation["metrics"]
        exact, parity = metrics.get("exact_match", {}), metrics.get("parity", {})
        per_task = _exact_by_task(registry, evaluation["id"])
        passed = evaluation["state"] == "passed"
        failing = ", ".join(evaluation["failing_metrics"]) or evaluation["reason"] or ""
        table.add_row(served_name, per_task.get("digits", "-"), per_task.get("reverse", "-"),
                      _figure(exact.get("value")),
                      _figure(parity.get("value"), 6),
                      "[green]passed[/green]" if passed else f"[red]failed: {escape(failing)}[/red]")
        outcome.evaluations[served_name] = {
            "state": evaluation["state"], "exact_match": exact.get("value"),
            "exact_match_min": exact.get("threshold", {}).get("min"), "parity": parity.get("value"),
            "failing_metrics": evaluation["failing_metrics"], "exact_by_task": per_task}
    console.print(table)


def _exact_by_task(registry: httpx.Client, evaluation_id: int) -> dict[str, str]:
    """'answered/asked' per task, from the evaluation's per-example results."""
    body = checked(registry.get(f"/v1/evaluations/{evaluation_id}", params={"examples_limit": 200}))
    counts: dict[str, list[int]] = {}
    for example in (body.get("examples") or {}).get("items", []):
        right_and_asked = counts.setdefault(example["prompt"].split(":")[0], [0, 0])
        right_and_asked[0] += example["exact_match"]
        right_and_asked[1] += 1
    return {task: f"{right}/{asked}" for task, (right, asked) in counts.items()}


def _promote(uploader: httpx.Client, reviewer: httpx.Client, setup: DemoSetup, story: Story,
             version: dict, outcome: Outcome) -> None:
    served_name = version["served_name"]
    aliases = checked(uploader.get(f"/v1/pools/{setup.pool}/aliases"))
    current = next((a["served_name"] for a in aliases if a["alias"] == "production"
                    and a["adapter"] == version["adapter"]), None)
    if story.good and current is not None:  # a run before this one promoted it, or its successor
        console.print(f"{setup.tenant}/{version['adapter']} is already served by {current} in pool {setup.pool!r}")
        return
    body = {"adapter": f"{version['tenant']}/{version['adapter']}", "version": version["number"],
            "alias": "production", "comment": "from loraplane demo"}
    try:
        promotion = checked(uploader.post(f"/v1/pools/{setup.pool}/promotions", json=body))
    except RegistryError as error:
        if story.good:
            outcome.problems.append(f"{served_name} was refused: {error.message}")
        outcome.blocked[served_name] = {"status": error.status, "code": error.code, "message": error.message}
        console.print(f"[red]✗ {served_name} blocked[/red] (HTTP {error.status} {error.code}): {escape(error.message)}")
        return
    if not story.good:
        outcome.problems.append(f"the broken {served_name} passed every gate")
        checked(reviewer.post(f"/v1/promotions/{promotion['id']}/reject", json={"comment": "broken"}))
        return
    approved = checked(reviewer.post(f"/v1/promotions/{promotion['id']}/approve",
                                     json={"comment": "evaluation passed; approved in the demo"}))
    console.print(f"[green]✓[/green] {served_name} → production: requested by ml-engineer, "
                  f"approved by reviewer (promotion {approved['id']}, {approved['state']})")


def _query(setup: DemoSetup, good: list[tuple[Story, dict]], suites: dict, outcome: Outcome) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=setup.router_url + "/v1", api_key=setup.tokens["app"], max_retries=0, timeout=60)
    table = Table("model", "prompt", "answer", "served by")
    for story, version in good:
        model = f"{setup.tenant}/{story.adapter}"
        rows = suites[story.task][FIRST_QUERY_ROW:FIRST_QUERY_ROW + QUERIES_PER_TASK]
        _wait_until_served(client, model, rows[0]["prompt"])
        correct, served_by = 0, ""
        for row in rows:
            raw = client.completions.with_raw_response.create(model=model, prompt=row["prompt"], max_tokens=16,
                                                            temperature=0)
            answer = raw.parse().choices[0].text
            served_by = raw.headers.get("x-loraplane-served-name", "")
            right = answer.strip() == row["reference"].strip()
            correct += right
            shown = f"[green]✓[/green] {escape(answer.strip())}" if right else \
                f"[red]✗ {escape(answer.strip())}[/red] (expected {escape(row['reference'].strip())})"
            table.add_row(model, escape(row["prompt"]), shown, served_by)
        outcome.served[model] = {"served_name": served_by, "correct": correct, "asked": len(rows)}
        if correct < len(rows) or served_by.split("@")[0] != version["served_name"].split("@")[0]:
            outcome.problems.append(f"{model} answered {correct}/{len(rows)} as expected, served by {served_by!r}")
    console.print(table)


def _wait_until_served(client, model: str, prompt: str) -> None:
    """The approval reached the node agent's long-poll at once; vLLM loads the adapter in a moment."""
    from openai import APIStatusError

    deadline = time.monotonic() + SERVING_TIMEOUT_S
    with console.status(f"waiting for the node to load {model} ..."):
        while True:
            try:
                client.completions.create(model=model, prompt=prompt, max_tokens=1)
                return
            except APIStatusError as error:
                if error.status_code not in (404, 503) or time.monotonic() > deadline:
                    fail(f"the router did not serve {model}: HTTP {error.status_code} {error.message}",
                         "See the agent's and router's logs in the data folder's logs/.")
            time.sleep(0.5)


def _show_blocked(setup: DemoSetup, version: dict, outcome: Outcome) -> None:
    from openai import APIStatusError, OpenAI

    served_name = version["served_name"]
    evaluation = outcome.evaluations.get(served_name, {})
    console.print(f"{served_name}: evaluation {evaluation.get('state')}, exact match "
                  f"{_figure(evaluation.get('exact_match'))} < {evaluation.get('exact_match_min')}")
    blocked = outcome.blocked.setdefault(served_name, {})
    if "message" in blocked:
        console.print(f"promotion refused: {escape(blocked['message'])}")
    client = OpenAI(base_url=setup.router_url + "/v1", api_key=setup.tokens["app"], max_retries=0, timeout=60)
    try:
        client.completions.create(model=served_name, prompt="digits: 1 2 =>", max_tokens=4)
        outcome.problems.append(f"the router answered with the broken {served_name}")
        blocked["router_status"] = 200
    except APIStatusError as error:
        blocked["router_status"] = error.status_code
        message = error.body.get("message", "") if isinstance(error.body, dict) else error.message
        console.print(f"the router, asked for {served_name}: HTTP {error.status_code}: {escape(message)}")
    production = outcome.served.get(f"{setup.tenant}/{version['adapter']}", {}).get("served_name")
    console.print(f"{setup.tenant}/{version['adapter']} is still answered by {production}")


def _summary(outcome: Outcome) -> dict:
    passed = not outcome.problems and bool(outcome.blocked) and all(
        "message" in entry and entry.get("router_status") == 404 for entry in outcome.blocked.values())
    if passed:
        console.print("\n[green]demo passed[/green]: two good adapters evaluated, approved and answering "
                      "through the router; the broken one blocked before any node loaded it; a retrained "
                      "one judged beside production on the tenant's own suite, then promoted by its canary.")
    for problem in outcome.problems:
        console.print(f"[red]✗ {escape(problem)}[/red]")
    return {"passed": passed, "evaluations": outcome.evaluations, "served": outcome.served,
            "blocked": outcome.blocked, "delivery": outcome.delivery, "problems": outcome.problems}


def _figure(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"
