"""The model card peft writes beside an adapter (README.md): accepted, kept with the version, and
shown in the dashboard as plain text. It is never rendered as HTML, so its Markdown cannot carry
script into the page."""

from __future__ import annotations

from registry.errors import PayloadTooLarge, Unprocessable

FILE = "README.md"
MAX_BYTES = 256 * 1024  # peft's default card is about 5 KB
# Text a card may hold: any printable character, and these layout ones.
LAYOUT = {"\n", "\r", "\t"}


def check_size(size: int) -> None:
    if size > MAX_BYTES:
        raise PayloadTooLarge(f"{FILE} is {size} bytes; a model card may have at most {MAX_BYTES}",
                              code="model_card_too_large",
                              hint="Shorten the model card, or upload the adapter without it.")


def check(data: bytes) -> str:
    """The card's text; refused if it is too large or is not UTF-8 text."""
    check_size(len(data))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise Unprocessable(f"{FILE} is not UTF-8 text (byte {error.start} cannot be decoded)",
                            code="invalid_model_card", hint="Save the model card as UTF-8 Markdown.") from None
    bad = next((i for i, char in enumerate(text) if not (char.isprintable() or char in LAYOUT)), None)
    if bad is not None:
        raise Unprocessable(f"{FILE} holds the control character {text[bad]!r} at character {bad}",
                            code="invalid_model_card", hint="Save the model card as UTF-8 Markdown.")
    return text
