"""`loraplane tenant ...`: create, list, rename, disable and enable tenants, and set their own
quotas. Global admins change tenants; a tenant's admins may list and show their own."""

from __future__ import annotations

import typer

from loraplane.cli_support import call, console, every_page, fail, print_json
from loraplane_client.connection import checked, connect

tenant_app = typer.Typer(
    help="Tenants: the slug in served names (tenant/adapter@N), a display name, whether its "
         "tokens work, and its own quotas. The slug never changes; `rename` changes the display "
         "name only.", no_args_is_help=True)
QUOTA_HELP = ("A number (1 to 1000000), or 'default' to go back to the deployment's "
              "LORAPLANE_TENANT_MAX_{}.")


@tenant_app.command("list")
def list_tenants(as_json: bool = typer.Option(False, "--json", help="Print the tenants as JSON.")):
    """Every tenant (a tenant admin: its own), with its state, quotas and counts."""
    items = every_page("/v1/tenants", {})
    if as_json:
        print_json(items)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("name", "display name", "state", "max waiting evals", "max suites", "adapters",
                  "active tokens", "created")
    for t in items:
        quotas = t["quotas"]
        table.add_row(t["name"], t["display_name"] or "",
                      "disabled" if t["disabled"] else "enabled",
                      _quota(quotas["max_waiting_evaluations"]), _quota(quotas["max_suites"]),
                      str(t["adapters"]), str(t["active_tokens"]), t["created_at"][:10])
    Console().print(table)


@tenant_app.command("create")
def create(
    name: str = typer.Argument(..., help="The slug: 1-64 lowercase letters, digits, '-' and '_'. "
                                         "It never changes."),
    display_name: str | None = typer.Option(None, "--display-name", help="What people read."),
    max_waiting_evaluations: int | None = typer.Option(
        None, "--max-waiting-evaluations", help="Its own quota (default: the deployment's)."),
    max_suites: int | None = typer.Option(None, "--max-suites",
                                          help="Its own quota (default: the deployment's)."),
):
    """Create a tenant (global admins); then: loraplane token create --tenant NAME."""
    body = {"name": name, "display_name": display_name,
            "max_waiting_evaluations": max_waiting_evaluations, "max_suites": max_suites}
    with connect() as client:
        tenant = call(lambda: checked(client.post("/v1/tenants", json=body)))
    console.print(f"created tenant {tenant['name']}")
    print_json(tenant)


@tenant_app.command("show")
def show(name: str = typer.Argument(...)):
    """One tenant: its state, quotas (own, default, effective) and counts."""
    with connect() as client:
        print_json(call(lambda: checked(client.get(f"/v1/tenants/{name}"))))


@tenant_app.command("rename")
def rename(name: str = typer.Argument(..., help="The tenant's slug."),
           display_name: str = typer.Argument(..., help="The new display name.")):
    """Change the display name. The slug never changes: served names, signed active sets,
    attestations and audit subjects name it."""
    _patch(name, {"display_name": display_name}, f"tenant {name} is now shown as {display_name!r}")


@tenant_app.command("disable")
def disable(name: str = typer.Argument(...)):
    """Refuse every token of the tenant at once, and the issuing of new ones. Its tokens are
    kept: `enable` restores them."""
    _patch(name, {"disabled": True}, f"tenant {name} is disabled: its tokens are refused")


@tenant_app.command("enable")
def enable(name: str = typer.Argument(...)):
    """Let the tenant's tokens work again (those neither revoked nor expired meanwhile)."""
    _patch(name, {"disabled": False}, f"tenant {name} is enabled")


@tenant_app.command("quota")
def quota(
    name: str = typer.Argument(...),
    max_waiting_evaluations: str | None = typer.Option(
        None, "--max-waiting-evaluations", help=QUOTA_HELP.format("WAITING_EVALUATIONS")),
    max_suites: str | None = typer.Option(None, "--max-suites", help=QUOTA_HELP.format("SUITES")),
):
    """Set the tenant's own quotas; those not given stay as they are."""
    body = {field: _quota_value(option, value) for field, option, value in (
        ("max_waiting_evaluations", "--max-waiting-evaluations", max_waiting_evaluations),
        ("max_suites", "--max-suites", max_suites)) if value is not None}
    if not body:
        fail("give --max-waiting-evaluations or --max-suites",
             f"e.g. loraplane tenant quota {name} --max-suites 50 (or 'default').")
    _patch(name, body, f"quotas of tenant {name} updated")


def _patch(name: str, body: dict, done: str) -> None:
    with connect() as client:
        tenant = call(lambda: checked(client.patch(f"/v1/tenants/{name}", json=body)))
    console.print(done)
    print_json(tenant)


def _quota_value(option: str, value: str) -> int | None:
    if value == "default":
        return None
    if not value.isdigit():
        fail(f"{option} must be a number or 'default', not {value!r}")
    return int(value)


def _quota(quota: dict) -> str:
    return f"{quota['effective']}" + (" (own)" if quota["own"] is not None else " (default)")
