"""`loraplane policy ...`: an adapter's evaluation policy, the suites of its own task and the
margins a challenger is held to against the version it would replace."""

from __future__ import annotations

import re

import typer

from loraplane.cli_support import call, console, fail, print_json
from loraplane_client.connection import checked, connect

policy_app = typer.Typer(help="An adapter's evaluation policy: its own suites and challenger margins.",
                         no_args_is_help=True)
ADAPTER = re.compile(r"^([a-z0-9][a-z0-9_-]*)/([a-z0-9][a-z0-9_-]*)$")
METRICS = ("exact_match", "contains", "reference_loglik")


@policy_app.command("show")
def show(adapter: str = typer.Argument(..., help="tenant/name")):
    """Print the adapter's policy, with the margin each metric is held to."""
    with connect() as client:
        print_json(call(lambda: checked(client.get(_path(adapter)))))


@policy_app.command("set")
def set_policy(
    adapter: str = typer.Argument(..., help="tenant/name"),
    suite: list[str] = typer.Option([], help=(
        "A suite every version must pass (repeatable): the tenant's own (tenant/name) or a "
        "global one, built for the adapter's base.")),
    margin: list[str] = typer.Option([], help=(
        "METRIC=VALUE (repeatable): how much lower than the incumbent's a challenger's value may "
        f"be, for {', '.join(METRICS)}.")),
    require_improvement: list[str] = typer.Option([], help=(
        "A metric on which a challenger must be strictly better than the incumbent (repeatable).")),
):
    """Replace the adapter's policy. New versions are evaluated on its suites at upload, each
    beside the version in production; promotions require them and the comparison."""
    margins = {}
    for item in margin:
        metric, sep, value = item.partition("=")
        if not sep or metric not in METRICS:
            fail(f"--margin {item!r} is not METRIC=VALUE", f"METRIC is one of {', '.join(METRICS)}; "
                 "for example --margin exact_match=0.05")
        try:
            margins[metric] = float(value)
        except ValueError:
            fail(f"--margin {item!r}: {value!r} is not a number", "For example --margin exact_match=0.05")
    body = {"required_suites": suite,
            "challenger": {"margins": margins, "require_improvement": require_improvement}}
    with connect() as client:
        policy = call(lambda: checked(client.put(_path(adapter), json=body)))
    if policy.get("proposed"):
        console.print(f"{adapter}: proposed, not in force: it weakens the policy ("
                      + "; ".join(policy["proposed"]["weakens"]) + "). A reviewer or admin of the tenant "
                      f"other than you puts it in force with `loraplane policy approve {adapter}`.")
    else:
        console.print(f"{adapter}: {len(policy['required_suites'])} suite(s) of its own")
    print_json(policy)


@policy_app.command("approve")
def approve(adapter: str = typer.Argument(..., help="tenant/name"),
            yes: bool = typer.Option(False, "--yes", help="Approve without asking, once it is shown.")):
    """Put a proposed policy that weakens the current one in force (a second person: a reviewer
    or admin of the tenant who did not propose it). Shows how it weakens the policy first, and
    approves exactly that proposal."""
    with connect() as client:
        current = call(lambda: checked(client.get(_path(adapter))))
        proposed = current.get("proposed")
        if not proposed:
            fail(f"{adapter} has no proposed evaluation policy", "A weakening is proposed with `loraplane policy set`.")
        console.print(f"{adapter}: proposed by {proposed['proposed_by']}; it weakens the policy in force:")
        for change in proposed["weakens"]:
            console.print(f"  - {change}")
        if not yes and not typer.confirm("Approve it?", err=True):
            fail("not approved", "Nothing changed.")
        print_json(call(lambda: checked(client.post(_path(adapter) + "/approve",
                                                    json={"sha256": proposed["sha256"]}))))


@policy_app.command("withdraw")
def withdraw(adapter: str = typer.Argument(..., help="tenant/name")):
    """Drop a proposed policy; the one in force stays."""
    with connect() as client:
        print_json(call(lambda: checked(client.delete(_path(adapter) + "/proposed"))))


def _path(adapter: str) -> str:
    match = ADAPTER.match(adapter)
    if not match:
        fail(f"{adapter!r} is not tenant/name", "For example: acme/support-bot")
    return f"/v1/adapters/{adapter}/evaluation-policy"
