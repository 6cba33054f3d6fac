"""Client side of evaluations: request one, watch it with a progress display, print its verdict."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from loraplane_client.connection import checked

FINISHED = ("passed", "failed")


def parse_version_ref(ref: str) -> tuple[str, str, int]:
    """tenant/name@N -> (tenant, name, N)."""
    adapter, sep, number = ref.rpartition("@")
    tenant, slash, name = adapter.partition("/")
    if not (sep and slash and tenant and name and number.isdigit() and int(number) >= 1):
        raise ValueError(f"expected a version like tenant/name@3, got {ref!r}")
    return tenant, name, int(number)


def request(client: httpx.Client, ref: str, suite: str, *, against: int | None = None,
            again: bool = False) -> dict:
    tenant, name, number = parse_version_ref(ref)
    body = {"suite": suite, **({"against": against} if against is not None else {}),
            **({"again": True} if again else {})}
    return checked(client.post(f"/v1/adapters/{tenant}/{name}/versions/{number}/evaluations", json=body))


def watch(client: httpx.Client, evaluation: dict, *, console: Console, poll_s: float = 1.0,
          timeout_s: float = 3600, show_progress: bool = True) -> dict:
    """Poll until the evaluation finishes, showing its state and how long it has taken."""
    path = f"/v1/evaluations/{evaluation['id']}"
    deadline = time.monotonic() + timeout_s
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=console, disable=not show_progress, transient=True) as progress:
        task = progress.add_task(_describe(evaluation))
        while evaluation["state"] not in FINISHED:
            if time.monotonic() > deadline:
                raise TimeoutError(f"evaluation {evaluation['id']} is still {evaluation['state']} "
                                   f"after {timeout_s:.0f} s; check it later with `loraplane eval show`")
            time.sleep(poll_s)
            evaluation = checked(client.get(path, params={"examples_limit": 1}))
            progress.update(task, description=_describe(evaluation))
    return evaluation


def _describe(evaluation: dict) -> str:
    attempts = f", attempt {evaluation['attempts']}" if evaluation["attempts"] > 1 else ""
    waiting = f" ({evaluation['reason']})" if evaluation["state"] == "queued" and evaluation["reason"] else ""
    return f"{evaluation['served_name']} on {evaluation['suite']}: {evaluation['state']}{attempts}{waiting}"


def render(evaluation: dict, console: Console) -> None:
    table = Table(title=f"evaluation {evaluation['id']}: {evaluation['served_name']} on "
                        f"{evaluation['suite']} — {evaluation['state'].upper()}")
    for column in ("metric", "adapter", "base", "threshold", "verdict", "detail"):
        table.add_column(column)
    for name, metric in evaluation["metrics"].items():
        table.add_row(name, _number(metric["value"]), _number(metric.get("base")),
                      json.dumps(metric["threshold"]), "pass" if metric["passed"] else "[red]FAIL[/red]",
                      metric.get("detail", ""))
    console.print(table)
    if evaluation["reason"]:
        console.print(f"reason: {evaluation['reason']}")
    if evaluation.get("engine"):
        engine = evaluation["engine"]
        console.print(f"engine: vLLM {engine.get('vllm_version', '?')} at {engine.get('url')}, "
                      f"flags {json.dumps(engine.get('flags', {}))}")


def render_pair(challenger: dict, incumbent: dict, console: Console) -> None:
    """The two versions' task metrics side by side, from one batch on one engine."""
    table = Table(title=f"{challenger['served_name']} against {incumbent['served_name']} on "
                        f"{challenger['suite']} (one batch)")
    for column in ("metric", challenger["served_name"], incumbent["served_name"], "difference"):
        table.add_column(column)
    for name, metric in challenger["metrics"].items():
        theirs = (incumbent["metrics"].get(name) or {}).get("value")
        mine = metric["value"]
        difference = _number(mine - theirs) if mine is not None and theirs is not None else "-"
        table.add_row(name, _number(mine), _number(theirs), difference)
    console.print(table)


def _number(value) -> str:
    return "-" if value is None else f"{value:.4g}"


def read_dataset(path: Path) -> list[dict]:
    """JSONL rows with prompt and reference; errors name the line."""
    rows = []
    # Rows end at "\n" only: str.splitlines() also breaks inside a JSON string at U+0085,
    # U+2028, U+2029 and other separators that JSON leaves unescaped.
    for number, line in enumerate(path.read_text(encoding="utf-8").split("\n"), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}:{number}: not JSON ({error.msg})") from None
        if not isinstance(row, dict) or not {"prompt", "reference"} <= set(row):
            raise ValueError(f"{path}:{number}: each row needs \"prompt\" and \"reference\"")
        rows.append({"prompt": row["prompt"], "reference": row["reference"]})
    if not rows:
        raise ValueError(f"{path} has no rows")
    return rows
