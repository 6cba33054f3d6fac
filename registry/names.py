"""Names that end up in served names (`tenant/name@N`), URLs and storage keys."""

from __future__ import annotations

import re

from registry.errors import Unprocessable

# Free text (comments, reasons) may hold newlines and tabs, but no NUL or other control characters.
FREE_TEXT = r"^[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f]*$"
NAME_PATTERN = re.compile(r"^[a-z0-9](?:[a-z0-9_-]{0,62}[a-z0-9])?$")
SERVED_NAME = r"^[a-z0-9][a-z0-9_-]{0,62}/[a-z0-9][a-z0-9_-]{0,62}@[1-9][0-9]{0,9}$"  # tenant/name@N


def check_name(value: str, kind: str) -> str:
    if not NAME_PATTERN.fullmatch(value):
        raise Unprocessable(
            f"invalid {kind} name {value!r}",
            code="invalid_name",
            hint="Use 1-64 characters: lowercase letters, digits, '-' and '_', "
            "starting and ending with a letter or digit.",
        )
    return value


def refuse_control_characters(value: str, label: str) -> str:
    """The database refuses NUL, and no legitimate name holds control characters."""
    if any(ord(char) < 32 or ord(char) == 127 for char in value):
        raise Unprocessable(f"{label} contains a control character", code="invalid_name",
                            hint="Remove control characters such as NUL.")
    return value
