"""One console for messages (stderr, so stdout stays parseable), and one way to stop a command."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

console = Console(stderr=True)


def fail(message: str, hint: str = "") -> NoReturn:
    # Never wrapped here: a path or a command split over two lines cannot be copied.
    console.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)
    if hint:
        console.print(f"[yellow]hint:[/yellow] {escape(hint)}", soft_wrap=True)
    raise typer.Exit(1)
