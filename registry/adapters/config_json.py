"""Read adapter_config.json strictly: one value per key, finite numbers, text that is Unicode.

`json` turns `1e999` into inf without complaint, keeps the last of two equal keys while another
reader may keep the first, and decodes "\\ud800" into a lone surrogate that no database or UTF-8
encoder accepts. Each would let the stored config mean something other than what was checked,
or fail later where it is written.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

from registry.errors import Unprocessable

Refuse = Callable[..., Unprocessable]
FINITE_HINT = "Write every number as a finite value: JSON has no NaN or Infinity, and 1e999 overflows."


class _NonFinite:
    """Stands in for a number that is not finite, until its place in the document is known."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def load(data: bytes, refuse: Refuse) -> object:
    def unique_keys(pairs: list[tuple[str, object]]) -> dict:
        document = dict(pairs)
        if len(document) != len(pairs):
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    raise refuse(f"key {key[:100]!r} appears more than once in one object",
                                 hint="Give each key one value.")
                seen.add(key)
        return document

    try:
        document = json.loads(data.decode("utf-8"), parse_float=_float, parse_constant=_NonFinite,
                              object_pairs_hook=unique_keys)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        # ValueError covers JSONDecodeError and integers too long to convert.
        raise refuse(f"not valid JSON ({str(error)[:200]})") from None
    found = _first_unrepresentable(document)
    if found is not None:
        path, value = found
        if isinstance(value, _NonFinite):
            raise refuse(f"{path} is {value.text[:40]}, which is not a finite number", hint=FINITE_HINT)
        raise refuse(f"{path} holds a lone surrogate ({_printable(value[:60])}), which is not Unicode text",
                     hint="Write text as UTF-8; \\ud800 to \\udfff may only appear in escaped pairs.")
    return document


def _float(text: str) -> float | _NonFinite:
    value = float(text)
    return value if math.isfinite(value) else _NonFinite(text)


def _first_unrepresentable(document: object) -> tuple[str, _NonFinite | str] | None:
    """The first non-finite number, or string (key or value) with a lone surrogate, and where it
    sits, as a path such as rank_pattern.q_proj or target_modules[0]."""
    # Each entry links to its parent's, so a path is only spelled out for the one found.
    stack: list[tuple[object, tuple | None]] = [(document, None)]
    while stack:
        value, link = stack.pop()
        if isinstance(value, _NonFinite) or (isinstance(value, str) and not _is_unicode(value)):
            return _spell(link), value
        if isinstance(value, dict):
            for key, item in reversed(value.items()):
                if not _is_unicode(key):
                    return _spell((link, key)), key
                stack.append((item, (link, key)))
        elif isinstance(value, list):
            stack.extend((value[index], (link, index)) for index in range(len(value) - 1, -1, -1))
    return None


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _printable(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _spell(link: tuple | None) -> str:
    steps = []
    while link is not None:
        link, step = link
        steps.append(f"[{step}]" if isinstance(step, int) else f".{_printable(step[:100])}")
    path = "".join(reversed(steps)).lstrip(".") or "the document"
    return path if len(path) <= 200 else "..." + path[-197:]
