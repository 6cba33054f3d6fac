"""What every CLI command shares: one way to fail, call the registry, and print JSON."""

from __future__ import annotations

import json

import typer
from rich.console import Console

from loraplane.client import RegistryError
from registry.errors import LoraplaneError

console = Console(stderr=True)


def fail(message: str, hint: str = "") -> None:
    console.print(f"[red]error:[/red] {message}")
    if hint:
        console.print(f"[yellow]hint:[/yellow] {hint}")
    raise typer.Exit(1)


def call(request):
    """Run request(); turn the registry's errors (and local ones) into a message and exit 1."""
    try:
        return request()
    except RegistryError as error:
        fail(f"{error.message} ({error.code}, HTTP {error.status})", error.hint)
    except LoraplaneError as error:
        fail(error.message, error.hint)
    except (OSError, ValueError) as error:
        fail(str(error))


def print_json(value) -> None:
    typer.echo(json.dumps(value, indent=2, default=str))
