"""`loraplane promotion ...` and `loraplane audit verify`."""

from __future__ import annotations

import re

import typer

from loraplane.cli_support import call, console, every_page, fail, print_json
from loraplane_client.connection import checked, connect

promotion_app = typer.Typer(help="Promote versions into pools, approve, reject and roll back.",
                            no_args_is_help=True)
audit_app = typer.Typer(help="The tamper-evident audit log.", no_args_is_help=True)
DIGEST = re.compile(r"^[0-9a-f]{64}$")
PINNED = re.compile(r"^([a-z0-9][a-z0-9_-]*)/([a-z0-9][a-z0-9_-]*)@([1-9][0-9]*)$")


@promotion_app.command("request")
def request(
    pool: str = typer.Argument(..., help="The pool to serve from."),
    version: str = typer.Argument(..., help="tenant/name@N"),
    alias: str = typer.Option("production", help="production, canary or another alias."),
    weight: int | None = typer.Option(None, help="Canary traffic percent (1-99)."),
    comment: str | None = typer.Option(None, help="Why, for the reviewer."),
    steps: str | None = typer.Option(None, help=(
        "A canary under analysis: its weights in order, e.g. 5,25*,50 (* waits for a reviewer "
        "after that step). After the last step passes it becomes production on its own; a "
        "failed check rolls it back.")),
    window_s: float = typer.Option(60, help="How long each step's analysis lasts."),
    min_requests: int = typer.Option(20, help="Canary requests a step needs before any verdict."),
    max_error_rate: float = typer.Option(0.05, help="Highest share of failed canary requests."),
    max_error_rate_increase: float | None = typer.Option(
        None, min=0, max=1, help=(
            "Highest excess of the canary's error rate over production's in the same window, "
            "e.g. 0.01 (0 to 1; default: not checked). Needs --steps.")),
    max_latency_p95_ratio: str = typer.Option("2.0", help=(
        "Highest p95 latency of canary over production (above 0, at most 1000), or 'off'.")),
    max_ttft_p95_ratio: str = typer.Option("2.0", help=(
        "Highest p95 TTFT of canary over production (above 0, at most 1000), or 'off'.")),
    min_tokens_per_s_ratio: float | None = typer.Option(
        None, help=("Lowest completion tokens per second of a canary request over production's, "
                    "e.g. 0.8 (above 0, at most 1000; default: not checked). Needs --steps.")),
    shadow: float = typer.Option(0.0, help="Share of canary requests also answered by production, to compare."),
):
    """Ask to point POOL's alias at VERSION. Every gate must pass; a reviewer then approves."""
    match = PINNED.match(version)
    if not match:
        fail(f"{version!r} is not tenant/name@N", "For example: acme/support-bot@3")
    tenant, name, number = match.groups()
    body = {"adapter": f"{tenant}/{name}", "version": int(number), "alias": alias, "weight": weight,
            "comment": comment}
    checks = {"max_error_rate_increase": max_error_rate_increase,
              "min_tokens_per_s_ratio": _ratio("--min-tokens-per-s-ratio", min_tokens_per_s_ratio),
              "max_latency_p95_ratio": _ratio("--max-latency-p95-ratio", max_latency_p95_ratio),
              "max_ttft_p95_ratio": _ratio("--max-ttft-p95-ratio", max_ttft_p95_ratio)}
    if steps is None:
        # These judge a canary's analysis: without --steps there is none to judge.
        given = [f"--{field.replace('_', '-')}" for field in ("max_error_rate_increase", "min_tokens_per_s_ratio")
                 if checks[field] is not None]
        if given:
            fail(f"{' and '.join(given)} judge a canary's analysis, which needs --steps",
                 "For example: --alias canary --steps 5,25*,50 " + " ".join(f"{o} ..." for o in given))
    else:
        body["analysis"] = {"steps": _steps(steps), "window_s": window_s, "min_requests": min_requests,
                            "max_error_rate": max_error_rate, **checks, "shadow_fraction": shadow}
    with connect() as client:
        promotion = call(lambda: checked(client.post(f"/v1/pools/{pool}/promotions", json=body)))
    console.print(f"promotion {promotion['id']} is {promotion['state']}: every gate passed")
    print_json(promotion)


def _ratio(option: str, value: float | str | None) -> float | None:
    """A ratio check's limit as the API takes it (above 0, at most 1000), or None: not checked."""
    if value is None or value == "off":
        return None
    try:
        ratio = float(value)
    except ValueError:
        fail(f"{option} {value!r} is not a number", f"For example {option} 1.5, or {option} off")
    if not 0 < ratio <= 1000:
        fail(f"{option} {value} must be above 0 and at most 1000", f"Or {option} off: not checked.")
    return ratio


def _steps(text: str) -> list[dict]:
    steps = []
    for item in text.split(","):
        weight = item.strip().rstrip("*")
        if not weight.isdigit():
            fail(f"--steps {text!r}: {item.strip()!r} is not a weight", "For example: --steps 5,25*,50")
        steps.append({"weight": int(weight), "manual_gate": item.strip().endswith("*")})
    return steps


@promotion_app.command("canary")
def canary(promotion_id: int = typer.Argument(...),
           action: str = typer.Argument("status", help="status, pause or resume.")):
    """A canary's analysis: its step and last check (status), or pause and resume it."""
    if action not in ("status", "pause", "resume"):
        fail(f"unknown action {action!r}", "Use status, pause or resume.")
    path = f"/v1/promotions/{promotion_id}/canary"
    with connect() as client:
        status = call(lambda: checked(client.get(path) if action == "status" else
                                      client.post(f"{path}/{action}")))
    console.print(f"canary {promotion_id}: step {status['step'] + 1} at {status['weight']}%, {status['state']}")
    print_json(status)


def _decide(promotion_id: int, verdict: str, comment: str, digest: str | None = None) -> None:
    body = {"comment": comment, **({"digest": digest} if digest else {})}
    with connect() as client:
        promotion = call(lambda: checked(client.post(f"/v1/promotions/{promotion_id}/{verdict}",
                                                     json=body)))
    console.print(f"promotion {promotion_id} is {promotion['state']}")
    print_json(promotion)


@promotion_app.command("approve")
def approve(promotion_id: int = typer.Argument(...),
            comment: str = typer.Option(..., help="Why it may serve (kept in the audit log)."),
            digest: str | None = typer.Option(None, help=(
                "The version digest (64 hex digits) you reviewed, from `promotion list` or the "
                "dashboard: the approval is refused (409 evaluated_bytes_changed) if the version "
                "no longer has it."))):
    """Approve a promotion: it becomes active and every node of the pool picks it up."""
    if digest is not None and not DIGEST.fullmatch(digest):
        fail(f"--digest {digest!r} is not a sha256 digest", "Give the version's 64 lowercase hex digits.")
    _decide(promotion_id, "approve", comment, digest)


@promotion_app.command("reject")
def reject(promotion_id: int = typer.Argument(...),
           comment: str = typer.Option(..., help="What must change (kept in the audit log).")):
    """Reject a promotion that awaits approval."""
    _decide(promotion_id, "reject", comment)


@promotion_app.command("list")
def list_promotions(pool: str | None = typer.Option(None, help="Only this pool's."),
                    state: str | None = typer.Option(None, help="e.g. awaiting_approval, active."),
                    tenant: str | None = typer.Option(None, help=(
                        "Only this tenant's (a global admin's choice; a tenant's people see their "
                        "own anyway)."))):
    """Promotions you may see, oldest first: every page of them."""
    params = {k: v for k, v in {"pool": pool, "state": state, "tenant": tenant}.items() if v is not None}
    print_json(every_page("/v1/promotions", params))


@promotion_app.command("rollback")
def rollback(
    pool: str = typer.Argument(...),
    adapter: str = typer.Argument(..., help="tenant/name"),
    comment: str = typer.Option(..., help="Why (kept in the audit log)."),
    alias: str = typer.Option("production"),
):
    """Point the alias back at the version before the current one, at once."""
    if adapter.count("/") != 1:
        fail(f"{adapter!r} is not tenant/name")
    with connect() as client:
        promotion = call(lambda: checked(client.post(
            f"/v1/pools/{pool}/aliases/{adapter}/{alias}/rollback", json={"comment": comment})))
    console.print(f"{pool}:{alias} of {adapter} now serves {promotion['served_name']}")
    print_json(promotion)


@audit_app.command("verify")
def verify():
    """Walk the audit hash chain in the registry's database (LORAPLANE_DATABASE_URL), list every
    edited, removed or unkeyed event, and check that the head recorded outside the database
    (LORAPLANE_AUDIT_HEAD_FILE) is still in the chain. Exits 1 if anything is wrong."""
    from rich.markup import escape

    from registry.audit.verify import verify_chain
    from registry.unit_of_work import transaction

    with transaction() as session:
        report = verify_chain(session)
    for problem in report.problems:
        where = f" event {problem.id}" if problem.id else ""  # a head file's problem has no event
        console.print(f"[red]{problem.kind}[/red]{where}: {escape(problem.detail)}")
    if not report.intact:
        fail(f"the audit chain is broken: {len(report.problems)} problem(s) in {report.events} events",
             "Compare the audit_events table with a backup and with the heads your webhook receivers "
             "kept. If every keyed event shows as altered, check that LORAPLANE_SECRET_KEY is the "
             "registry's.")
    typer.echo(f"audit chain intact: {report.events} events, head {report.head}")
    if report.keyed_by_previous_secret:
        typer.echo(f"{report.keyed_by_previous_secret} of them keyed with a previous secret "
                   "(LORAPLANE_PREVIOUS_SECRET_KEYS): keep it there while they must verify")
    typer.echo(report.anchor)
