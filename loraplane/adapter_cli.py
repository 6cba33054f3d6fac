"""`loraplane adapter ...` and `loraplane version ...`: find adapters, and retire or delete
adapters and versions that no active set, undecided promotion or (for a delete) unfinished
evaluation or verifying attestation holds. A tenant's admins and uploaders, for its own."""

from __future__ import annotations

import re

import typer

from loraplane.cli_support import call, console, every_page, fail, print_json
from loraplane_client.connection import checked, connect

adapter_app = typer.Typer(help="Adapters: list them, retire or delete them.", no_args_is_help=True)
version_app = typer.Typer(help="Adapter versions: retire or delete one.", no_args_is_help=True)
ADAPTER = re.compile(r"([^/@\s]+)/([^/@\s]+)")
VERSION = re.compile(r"([^/@\s]+)/([^/@\s]+)@([0-9]{1,10})")
RETIRE_HELP = ("Never promoted, rolled back to or evaluated again; kept whole for the record. "
               "Refused while an active set or an undecided promotion holds it.")
DELETE_HELP = ("Clear the files it names and release its blobs (the housekeeper collects them "
               "after LORAPLANE_BLOB_GC_GRACE_S); the record and audit trail stay. Refused while "
               "an active set, an undecided promotion, an unfinished evaluation or an attestation "
               "that still verifies holds it.")


@adapter_app.command("list")
def list_adapters(
    tenant: str | None = typer.Option(None, help="Only this tenant's (a global admin's choice)."),
    base_model: str | None = typer.Option(None, "--base-model", help="Only adapters of this base."),
    search: str | None = typer.Option(None, "--search", help="A substring of the name."),
    state: str | None = typer.Option(None, help="active, retired or deleted."),
    pool: str | None = typer.Option(None, help="Only adapters the pool serves or is retiring."),
    as_json: bool = typer.Option(False, "--json", help="Print the adapters as JSON."),
):
    """Adapters, oldest first, filtered."""
    filters = {key: value for key, value in (("tenant", tenant), ("base_model", base_model),
                                             ("q", search), ("state", state), ("pool", pool)) if value}
    items = every_page("/v1/adapters", filters)
    if as_json:
        print_json(items)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("adapter", "base model", "state", "latest version", "created")
    for a in items:
        table.add_row(f"{a['tenant']}/{a['name']}", a["base_model"], a["state"],
                      str(a["latest_version"] or ""), a["created_at"][:10])
    Console().print(table)


@adapter_app.command("retire", help=f"Retire an adapter and each of its versions. {RETIRE_HELP} "
                                    "It takes no new version, and its name is never reused.")
def retire_adapter(adapter: str = typer.Argument(..., help="tenant/name")):
    tenant, name = _adapter(adapter)
    _send("POST", f"/v1/adapters/{tenant}/{name}/retire", f"retired {tenant}/{name}")


@adapter_app.command("delete", help=f"Delete an adapter and each of its versions. {DELETE_HELP}")
def delete_adapter(adapter: str = typer.Argument(..., help="tenant/name")):
    tenant, name = _adapter(adapter)
    _send("DELETE", f"/v1/adapters/{tenant}/{name}", f"deleted {tenant}/{name}")


@version_app.command("retire", help=f"Retire one version. {RETIRE_HELP}")
def retire_version(version: str = typer.Argument(..., help="tenant/name@N")):
    tenant, name, number = _version(version)
    _send("POST", f"/v1/adapters/{tenant}/{name}/versions/{number}/retire",
          f"retired {tenant}/{name}@{number}")


@version_app.command("delete", help=f"Delete one version. {DELETE_HELP}")
def delete_version(version: str = typer.Argument(..., help="tenant/name@N")):
    tenant, name, number = _version(version)
    _send("DELETE", f"/v1/adapters/{tenant}/{name}/versions/{number}",
          f"deleted {tenant}/{name}@{number}")


def _send(method: str, path: str, done: str) -> None:
    with connect() as client:
        body = call(lambda: checked(client.request(method, path)))
    console.print(done)
    print_json(body)


def _adapter(value: str) -> tuple[str, str]:
    match = ADAPTER.fullmatch(value)
    if match is None:
        hint = ("For one version: loraplane version retire|delete TENANT/NAME@N." if "@" in value
                else "e.g. acme/support-bot")
        fail(f"{value!r} is not an adapter (tenant/name)", hint)
    return match.group(1), match.group(2)


def _version(value: str) -> tuple[str, str, int]:
    match = VERSION.fullmatch(value)
    if match is None:
        fail(f"{value!r} is not a version (tenant/name@N)", "e.g. acme/support-bot@3")
    return match.group(1), match.group(2), int(match.group(3))
