"""multipart/form-data bodies written byte by byte, well-formed or not."""

from __future__ import annotations

BOUNDARY = "hostile-corpus-boundary"


def part(name: str | bytes, data: bytes, *, filename: str | bytes | None = None,
         headers: list[bytes] = ()) -> bytes:
    def text(value: str | bytes) -> bytes:
        return value if isinstance(value, bytes) else value.encode("utf-8", "surrogatepass")

    disposition = b'form-data; name="' + text(name) + b'"'
    if filename is not None:
        disposition += b'; filename="' + text(filename) + b'"'
    lines = [b"Content-Disposition: " + disposition, *headers]
    return b"--" + BOUNDARY.encode() + b"\r\n" + b"\r\n".join(lines) + b"\r\n\r\n" + data + b"\r\n"


def close() -> bytes:
    return b"--" + BOUNDARY.encode() + b"--\r\n"


def content_type(boundary: str = BOUNDARY) -> str:
    return f"multipart/form-data; boundary={boundary}"


def form_body(files: list[tuple[str, bytes]], fields: dict[str, str]) -> tuple[bytes, str]:
    parts = [part(name, value.encode()) for name, value in fields.items()]
    parts += [part("file", data, filename=filename) for filename, data in files]
    return b"".join(parts) + close(), content_type()
