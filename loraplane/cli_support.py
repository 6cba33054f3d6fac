"""What every CLI command shares: one way to fail, call the registry, and print JSON."""

from __future__ import annotations

import json

import typer

from loraplane_client.connection import RegistryError, checked, connect
from loraplane_client.terminal import console, fail
from registry.errors import LoraplaneError

__all__ = ["call", "console", "every_page", "fail", "print_json", "settings_or_fail"]


def settings_or_fail(make, prefix: str, token_field: str, token_hint: str):
    """Build a settings object, or fail naming the variable or option that was wrong."""
    from pydantic import ValidationError

    try:
        return make()
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        message = first["msg"].removeprefix("Value error, ")
        fail(f"{field} ({prefix}{field.upper()}): {message}" if field else message,
             token_hint if field == token_field else "")


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


def every_page(path: str, params: dict) -> list[dict]:
    """Every item of a paged listing, following its cursor to the end."""
    items: list[dict] = []
    cursor = None
    with connect() as client:
        while True:
            sent = {**params, "limit": 200, **({"cursor": cursor} if cursor else {})}
            page = call(lambda sent=sent: checked(client.get(path, params=sent)))
            items += page["items"]
            cursor = page["next_cursor"]
            if not cursor:
                return items


def print_json(value) -> None:
    typer.echo(json.dumps(value, indent=2, default=str))
