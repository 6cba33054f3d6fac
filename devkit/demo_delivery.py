"""The demo's second half: the tenant brings the eval set of its own task, a new version is judged
against the version in production, and its canary is promoted by the evidence of live traffic.

    6. the uploader creates the tenant's own suite (demo/digits-task) and makes it the digits
       adapter's policy; a retrained digits adapter (demo/digits@3) is evaluated on it beside
       demo/digits@1, in one batch, and shown side by side;
    7. demo/digits@3 goes out as a canary under analysis (half the traffic, a 10 s window); the
       demo sends requests through the router, and the housekeeper promotes it on its own.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
from rich.markup import escape
from rich.table import Table

from loraplane_client.connection import RegistryError, checked
from loraplane_client.push import push
from loraplane_client.terminal import console

TASK_SUITE = "digits-task"
TASK_ROWS = 12
CANARY_POLICY = {"steps": [{"weight": 50}], "window_s": 10, "min_requests": 10, "max_error_rate": 0.05,
                 "max_ttft_p95_ratio": 5.0, "max_latency_p95_ratio": 5.0, "shadow_fraction": 0.2}
DECISION_TIMEOUT_S = 180


def challenge(uploader: httpx.Client, setup, kit_dir: Path, suites: dict, problems: list[str]) -> dict:
    """Returns the new version and its comparison with production."""
    suite = f"{setup.tenant}/{TASK_SUITE}"
    try:
        checked(uploader.post("/v1/eval-suites", json={
            "name": TASK_SUITE, "tenant": setup.tenant, "base_model": setup.base_model,
            "examples": suites["digits_to_words"][:TASK_ROWS], "metrics": {"exact_match": {"min": 0.9}},
            "generation": {"max_tokens": 16}}))
        console.print(f"created the tenant's suite {suite}: {TASK_ROWS} digits prompts, exact match ≥ 0.9")
    except RegistryError as error:
        if error.code != "already_exists":
            raise
    checked(uploader.put(f"/v1/adapters/{setup.tenant}/digits/evaluation-policy", json={"required_suites": [suite]}))
    console.print(f"{setup.tenant}/digits now requires {suite} of every version, beside the pool's suite")
    version, _ = push(uploader, kit_dir / "adapters" / "digits_to_words_v2", setup.tenant, "digits")
    console.print(f"{version['served_name']}  digits_to_words, retrained (another seed)")
    path = f"/v1/adapters/{setup.tenant}/digits/versions/{version['number']}/evaluations"
    paired = [e for e in checked(uploader.get(path))["items"] if e["suite"] == suite and e.get("pair")]
    if not paired:
        problems.append(f"{version['served_name']} was not evaluated beside production on {suite}")
        return {"version": version}
    mine = _finished(uploader, paired[0]["id"])
    theirs = _finished(uploader, paired[0]["pair"]["other_evaluation_id"])
    table = Table(title=f"{suite}: {mine['served_name']} beside {theirs['served_name']}, one batch")
    for column in ("metric", mine["served_name"], theirs["served_name"]):
        table.add_column(column)
    for metric, result in mine["metrics"].items():
        table.add_row(metric, _figure(result["value"]), _figure(theirs["metrics"].get(metric, {}).get("value")))
    console.print(table)
    comparison = {"suite": suite, "challenger": mine["served_name"], "incumbent": theirs["served_name"],
                  "challenger_exact_match": mine["metrics"]["exact_match"]["value"],
                  "incumbent_exact_match": theirs["metrics"]["exact_match"]["value"],
                  "same_batch": mine["started_at"] == theirs["started_at"]}
    if mine["state"] != "passed":
        problems.append(f"{mine['served_name']} failed {suite}: {mine['reason']}")
    return {"version": version, "comparison": comparison}


def canary(uploader: httpx.Client, reviewer: httpx.Client, setup, version: dict, prompt: str,
           problems: list[str]) -> dict:
    served = version["served_name"]
    aliases = checked(uploader.get(f"/v1/pools/{setup.pool}/aliases"))
    if any(a["served_name"] == served and a["alias"] == "production" for a in aliases):
        console.print(f"{served} is already production in pool {setup.pool!r}")
        return {"state": "promoted", "already": True}
    body = {"adapter": f"{setup.tenant}/digits", "version": version["number"], "alias": "canary",
            "analysis": CANARY_POLICY, "comment": "retrained; let live traffic decide"}
    try:
        promotion = checked(uploader.post(f"/v1/pools/{setup.pool}/promotions", json=body))
    except RegistryError as error:
        problems.append(f"the canary of {served} was refused: {error.message}")
        return {"state": "refused", "message": error.message}
    checked(reviewer.post(f"/v1/promotions/{promotion['id']}/approve",
                          json={"comment": "approved with its analysis policy"}))
    console.print(f"canary {served} at 50% approved by reviewer, with its policy: a {CANARY_POLICY['window_s']} s "
                  f"window, {CANARY_POLICY['min_requests']} requests at least, error rate ≤ 5%, p95 latency "
                  "and TTFT ≤ 5× production's")
    state, counts = _drive_traffic(uploader, setup, promotion["id"], prompt)
    status = checked(uploader.get(f"/v1/promotions/{promotion['id']}/canary"))
    table = Table(title=f"canary {served}: {state}")
    for column in ("check", "canary", "production", "limit", "result"):
        table.add_column(column)
    table.add_row("requests", str(status["canary"]["requests"]), str(status["production"]["requests"]),
                  str(CANARY_POLICY["min_requests"]), "")
    for check in status["checks"]:
        result = {True: "passed", False: "[red]failed[/red]", None: "not judged"}[check["passed"]]
        table.add_row(check["metric"], _figure(check["canary"]), _figure(check["production"]),
                      str(check["limit"]), result)
    if status["canary"]["shadow_compared"]:
        table.add_row("shadow agreement", _figure(status["canary"]["shadow_agreement"]), "", "", "reported")
    console.print(table)
    console.print(f"answered during the canary: {escape(str(counts))}")
    if state != "promoted":
        problems.append(f"the canary of {served} was {state}, not promoted")
    else:
        console.print(f"[green]✓[/green] the housekeeper promoted {served} to production on the evidence; "
                      "the reviewer's approval of the policy was the second pair of eyes")
    return {"state": state, "canary_requests": status["canary"]["requests"], "answered": counts}


def _finished(client: httpx.Client, evaluation_id: int) -> dict:
    deadline = time.monotonic() + DECISION_TIMEOUT_S * 5
    with console.status(f"evaluating (evaluation {evaluation_id}) ..."):
        while time.monotonic() < deadline:
            evaluation = checked(client.get(f"/v1/evaluations/{evaluation_id}"))
            if evaluation["state"] in ("passed", "failed"):
                return evaluation
            time.sleep(0.25)  # a local registry: asking often costs it little
    raise RuntimeError(f"evaluation {evaluation_id} did not finish; see the worker's log")


def _drive_traffic(uploader: httpx.Client, setup, promotion_id: int, prompt: str) -> tuple[str, dict]:
    counts: dict[str, int] = {}
    deadline = time.monotonic() + DECISION_TIMEOUT_S
    headers = {"Authorization": f"Bearer {setup.tokens['app']}"}
    with httpx.Client(base_url=setup.router_url, headers=headers, timeout=60) as router, \
            console.status("sending requests for demo/digits through the router ...") as shown:
        while time.monotonic() < deadline:
            response = router.post("/v1/completions", json={"model": f"{setup.tenant}/digits", "prompt": prompt,
                                                           "max_tokens": 8, "temperature": 0})
            name = response.headers.get("x-loraplane-served-name", f"HTTP {response.status_code}")
            counts[name] = counts.get(name, 0) + 1
            state = checked(uploader.get(f"/v1/promotions/{promotion_id}"))["canary_state"]
            shown.update(f"canary {state}; answered so far: {counts}")
            if state in ("promoted", "rolled_back"):
                return state, counts
    return "undecided", counts


def _figure(value, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}g}"
