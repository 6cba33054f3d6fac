"""`loraplane verify tenant/name@N`: the provenance chain of a version, readable top-down.

Exit 0 when every link holds, 1 when one fails (named in red, with a hint), 2 when the request
itself is wrong (no such version, an unreadable trust bundle file)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NoReturn

import httpx
import typer
from rich.console import Console
from rich.markup import escape

from loraplane.cli_support import console as err_console
from loraplane.promotion_cli import PINNED
from loraplane_client.connection import RegistryError, connect

USAGE = 2
MARKS = {"holds": "[green]✓[/green]", "fails": "[red]✗[/red]", "unchecked": "[yellow]?[/yellow]"}


def verify(
    version: str = typer.Argument(..., help="The version, as tenant/name@N."),
    pool: str | None = typer.Option(None, help="Only the attestations of this pool."),
    folder: Path | None = typer.Option(
        None, help="A downloaded copy of the version: every file must hash to the attested sha256, "
                   "and nothing else may be in it."),
    trust_bundle: Path | None = typer.Option(
        None, "--trust-bundle", help="A pinned copy of the registry's trust bundle to verify "
                                     "against (default: fetch it from the registry itself)."),
    as_json: bool = typer.Option(False, "--json", help="Print the chain as JSON."),
):
    """Prove what VERSION is: its bytes, the signed attestation of its approval, the people who
    approved it, the evaluation evidence and the audit event. Exits 0 when every link holds, 1
    when one fails, 2 when the version or a file cannot be read."""
    from loraplane.verify import VerifyUsageError, verify as walk

    match = PINNED.match(version)
    if not match:
        _usage(f"{version!r} is not tenant/name@N", "For example: acme/support-bot@3")
    tenant, name, number = match.groups()
    with connect() as client:
        try:
            report = walk(client, tenant, name, int(number), pool=pool, folder=folder,
                          trust_bundle_file=trust_bundle, show_progress=not as_json)
        except RegistryError as error:
            _usage(f"{error.message} ({error.code}, HTTP {error.status})", error.hint)
        except VerifyUsageError as error:
            _usage(error.message, error.hint)
        except httpx.HTTPError as error:
            _usage(f"cannot reach the registry at {client.base_url}: {error}",
                   "Set LORAPLANE_URL to the registry's address.")
    if as_json:
        typer.echo(json.dumps(report.as_json(), indent=2, default=str))
    else:
        render(report, Console(soft_wrap=True, highlight=False))
    if not report.holds:
        raise typer.Exit(1)


def _usage(message: str, hint: str = "") -> NoReturn:
    err_console.print(f"[red]error:[/red] {escape(message)}")
    if hint:
        err_console.print(f"[yellow]hint:[/yellow] {escape(hint)}")
    raise typer.Exit(USAGE)


def render(report, out: Console) -> None:
    out.print(f"[bold]{escape(report.served_name)}[/bold]")
    for link in report.links:
        _link(out, link, "")
        if link.name == "bytes":
            for f in report.files:
                out.print(f"    {escape(f['name'])}  sha256 {f['sha256']}  {f['size']} bytes")
    if report.trust_bundle_source.startswith("fetched"):
        out.print("  [yellow]note:[/yellow] the trust bundle came from the registry it vouches for; "
                  "pin a copy with --trust-bundle to check the registry itself")
    for chain in report.attestations:
        if chain.current:
            _attestation(out, chain)
    earlier = [c for c in report.attestations if not c.current]
    if earlier:
        out.print("\n[bold]earlier attestations[/bold] (superseded; not counted)")
        for chain in earlier:
            state = next((link for link in chain.links if link.state != "holds"), None)
            verdict = "verifies" if state is None else f"does not verify: {state.detail}"
            out.print(f"  #{chain.id} {chain.action} in {escape(chain.pool)}, key {chain.key_id[:16]}…, "
                      f"{chain.created_at}: {escape(verdict)}")
    out.print()
    failed = [(where, link) for where, link in report.counted() if link.state == "fails"]
    if failed:
        where, link = failed[0]
        out.print(f"[red]the chain breaks at: {escape(link.name)}"
                  f"{' of ' + escape(where) if where else ''}[/red]")
        if link.hint:
            out.print(f"[yellow]hint:[/yellow] {escape(link.hint)}")
    elif any(link.state == "unchecked" for _, link in report.counted()):
        out.print("[green]every link this token may check holds[/green]; "
                  "[yellow]the audit event was not checked[/yellow]")
    else:
        out.print("[green]every link holds[/green]")


def _link(out: Console, link, indent: str) -> None:
    out.print(f"{indent}  {MARKS[link.state]} {link.name:<13} {escape(link.detail)}")
    if link.state != "holds" and link.hint:
        out.print(f"{indent}    [yellow]hint:[/yellow] {escape(link.hint)}")


def _attestation(out: Console, chain) -> None:
    facts: dict[str, Any] = chain.statement.get("predicate") or {}
    out.print(f"\n[bold]attestation {chain.id}[/bold] ({escape(chain.action)}, pool {escape(chain.pool)})")
    links = {link.name: link for link in chain.links}
    _link(out, links["signature"], "")
    if links["signature"].state != "holds":
        out.print("    [red]not proven: what follows is the registry's word only[/red]")
    for name in ("pool", "subjects"):
        if name in links:
            _link(out, links[name], "")
    base = facts.get("base_model") or {}
    out.print(f"    signed at {facts.get('signed_at')}, approved at {facts.get('approved_at')}")
    out.print(f"    serves pool {escape(str(facts.get('pool')))}, alias {escape(str(facts.get('alias')))}, "
              f"weight {facts.get('weight')}, on base {escape(str(base.get('name')))} "
              f"(config sha256 {str(base.get('config_sha256'))[:12]}…)")
    out.print("  [bold]people[/bold]")
    for role in ("uploader", "requester", "approver"):
        out.print(f"    {role:<10} {escape(_person(facts.get(role)))}")
    if facts.get("comment"):
        out.print(f"    comment    {escape(json.dumps(facts['comment']))}")
    out.print("  [bold]evaluation evidence[/bold]")
    for evaluation in facts.get("evaluations") or []:
        out.print(f"    {escape(_evaluation(evaluation))}")
    if not facts.get("evaluations"):
        out.print("    none recorded")
    if "audit event" in links:
        _link(out, links["audit event"], "")


def _person(person: dict[str, Any] | None) -> str:
    if not person:
        return "none recorded"
    # The label is how the token named itself when it acted; the identity is who that was.
    return f"identity {person.get('identity_id')} ({person.get('name')}), as {person.get('label')}"


def _evaluation(evaluation: dict[str, Any]) -> str:
    metrics = ", ".join(f"{name} {_number(m.get('value'))} {'pass' if m.get('passed') else 'FAIL'}"
                        for name, m in (evaluation.get("metrics") or {}).items())
    engine = evaluation.get("engine")
    run_on = (f"vLLM {engine.get('vllm_version', '?')}, dtype {engine.get('dtype', '?')}, flags "
              f"{json.dumps(engine.get('flags', {}), sort_keys=True)}" if engine else "engine not recorded")
    return (f"{evaluation.get('suite')}: {evaluation.get('state')} (evaluation {evaluation.get('id')}, "
            f"finished {evaluation.get('finished_at')}); {metrics or 'no metrics'}; {run_on}")


def _number(value) -> str:
    return "-" if not isinstance(value, (int, float)) else f"{value:.4g}"
