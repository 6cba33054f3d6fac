"""Receive a multipart upload as it arrives.

Each file part is spooled to disk and hashed on the way in, so nothing is held in memory whole.
When the client declares the weights' sha256 first (`loraplane push` does), the weights also
stream into the object store under their final content address while they arrive. That write
is only completed after validation, so a refused upload never becomes visible.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterable
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import Request
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.concurrency import run_in_threadpool

from registry.adapters.artifact import blob_key
from registry.adapters.part_pump import PartPump
from registry.adapters.safetensors_check import FILE as WEIGHTS_FILE
from registry.errors import BadRequest, UnsupportedMediaType
from registry.storage.base import ArtifactStore, BlobWriter

FILE_FIELD, BASE_MODEL_FIELD, WEIGHTS_SHA256_FIELD = "file", "base_model", "weights_sha256"
FOLD_SCALING_FIELD = "fold_scaling"
TEXT_FIELDS = (BASE_MODEL_FIELD, WEIGHTS_SHA256_FIELD, FOLD_SCALING_FIELD)
MAX_PARTS = 8
MAX_FIELD_BYTES = 4096
MAX_HEADER_BYTES = 8192
MAX_PART_HEADERS = 16
MAX_BOUNDARY_BYTES = 70
SHA256 = re.compile(r"[0-9a-f]{64}")

OPENAPI_BODY = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object",
    "required": [FILE_FIELD],
    "properties": {
        FILE_FIELD: {"type": "array", "items": {"type": "string", "format": "binary"},
                     "description": "adapter_config.json and adapter_model.safetensors, "
                                    "optionally with model.sig (a model-signing signature of "
                                    "them by one of the tenant's signing keys), or one "
                                    ".tar.gz/.tgz/.tar/.zip of a PEFT folder."},
        BASE_MODEL_FIELD: {"type": "string", "description": "Target base model; defaults to the "
                                                            "one named in adapter_config.json."},
        WEIGHTS_SHA256_FIELD: {"type": "string", "pattern": "^[0-9a-f]{64}$",
                               "description": "sha256 of adapter_model.safetensors, sent before "
                                              "the files: checked, and lets the weights stream."},
        FOLD_SCALING_FIELD: {"type": "string", "enum": ["true", "false"], "default": "false",
                             "description": "true: serve a derived copy with rank_pattern and "
                                            "alpha_pattern folded into lora_B (docs/families.md); "
                                            "the upload is kept as the version's derived_from."},
    }}}}}}


@dataclass(frozen=True)
class ReceivedFile:
    filename: str
    path: Path
    sha256: str
    size: int


@dataclass
class ReceivedUpload:
    files: list[ReceivedFile] = field(default_factory=list)
    fields: dict[str, str] = field(default_factory=dict)
    # The weights, already sent to the store under the declared address; not yet completed.
    streamed: BlobWriter | None = None


class _Part:
    def __init__(self, headers: dict[bytes, bytes], workdir: Path, index: int) -> None:
        _, options = parse_options_header(headers.get(b"content-disposition", b""))
        self.name = options.get(b"name", b"").decode("utf-8", "replace")
        filename = options.get(b"filename")
        self.filename = filename.decode("utf-8", "replace") if filename is not None else None
        self.text = bytearray()
        self.sha256, self.size = hashlib.sha256(), 0
        self.pump: PartPump | None = None
        self.path = workdir / f"part-{index}"
        self.file = self.path.open("wb") if self.filename is not None else None

    async def write(self, data: bytes | memoryview) -> None:
        if self.file is None:
            self.text += data
            if len(self.text) > MAX_FIELD_BYTES:
                raise BadRequest(f"form field {self.name!r} is longer than {MAX_FIELD_BYTES} bytes",
                                 code="invalid_field", hint="Send short text fields only.")
            return
        self.file.write(data)
        self.sha256.update(data)
        self.size += len(data)
        if self.pump is not None:
            await self.pump.wrote(len(data), self.file)


async def receive_upload(request: Request, body: AsyncIterable[bytes], workdir: Path,
                         store: ArtifactStore) -> ReceivedUpload:
    """Receive the multipart body, read from `body` (the request's, under receive_deadlines)."""
    content_type, options = parse_options_header(request.headers.get("content-type", ""))
    if content_type != b"multipart/form-data" or not options.get(b"boundary"):
        raise UnsupportedMediaType(
            f"expected multipart/form-data, got {content_type.decode('latin-1') or 'no content type'!r}",
            hint="curl -F file=@adapter_config.json -F file=@adapter_model.safetensors ...",
        )
    upload = ReceivedUpload()
    events: list[tuple[str, bytes | memoryview]] = []
    parts: list[_Part] = []
    header: list[bytes] = [b"", b""]
    headers: dict[bytes, bytes] = {}
    boundary = options[b"boundary"]
    if len(boundary) > MAX_BOUNDARY_BYTES:  # RFC 2046 allows 70; the parser would raise its own error
        raise _malformed(f"the boundary is longer than {MAX_BOUNDARY_BYTES} bytes")
    parser = MultipartParser(boundary, {
        "on_part_begin": lambda: events.append(("begin", b"")),
        "on_header_field": lambda d, s, e: events.append(("field", d[s:e])),
        "on_header_value": lambda d, s, e: events.append(("value", d[s:e])),
        "on_header_end": lambda: events.append(("header", b"")),
        "on_headers_finished": lambda: events.append(("headers", b"")),
        # A view, not a copy: it is consumed before the parser is given the next chunk.
        "on_part_data": lambda d, s, e: events.append(("data", memoryview(d)[s:e])),
        "on_part_end": lambda: events.append(("end", b"")),
    })
    part: _Part | None = None
    try:
        async for chunk in body:
            try:
                parser.write(chunk)
            except FormParserError as error:
                raise _malformed(str(error)) from None
            for kind, value in events:
                if kind == "begin":
                    header, headers = [b"", b""], {}
                elif kind in ("field", "value"):
                    header[kind == "value"] += value
                    if len(header[0]) + len(header[1]) > MAX_HEADER_BYTES:
                        raise _malformed(f"a part header is longer than {MAX_HEADER_BYTES} bytes")
                elif kind == "header":
                    headers[header[0].lower()] = header[1]
                    header = [b"", b""]
                    if len(headers) > MAX_PART_HEADERS:
                        raise _malformed(f"a part has more than {MAX_PART_HEADERS} headers")
                elif kind == "headers":
                    if len(parts) >= MAX_PARTS:
                        raise _malformed(f"more than {MAX_PARTS} parts")
                    part = _Part(headers, workdir, len(parts))
                    parts.append(part)
                    await _maybe_stream(part, upload, store)
                elif part is None:  # the parser reports data and ends only inside a part
                    raise _malformed(f"{kind} outside a part")
                elif kind == "data":
                    await part.write(value)
                elif kind == "end":
                    await _finish_part(part, upload)
                    part = None
            events.clear()
        if part is not None or not parts:
            raise _malformed("the body ended before the last part did")
    except BaseException:
        for open_part in parts:
            if open_part.file is not None:
                open_part.file.close()
            if open_part.pump is not None:
                await open_part.pump.abort()
        raise
    return upload


async def _maybe_stream(part: _Part, upload: ReceivedUpload, store: ArtifactStore) -> None:
    declared = upload.fields.get(WEIGHTS_SHA256_FIELD, "").lower()
    if part.filename != WEIGHTS_FILE or upload.streamed is not None or not SHA256.fullmatch(declared):
        return
    key = blob_key(declared)
    if await run_in_threadpool(store.has, key):
        return  # the same bytes are stored already; they are only checked this time
    writer = await run_in_threadpool(store.begin_write, key)
    if writer is not None:
        part.pump = PartPump(writer, part.path)
        upload.streamed = writer


async def _finish_part(part: _Part, upload: ReceivedUpload) -> None:
    if part.file is None or part.filename is None:  # a text field (a file part has both)
        if part.name not in TEXT_FIELDS or part.name in upload.fields:
            raise BadRequest(f"unknown or repeated form field {part.name!r}", code="unknown_field",
                             hint=f"Send files as {FILE_FIELD!r}, and optionally one of each of "
                                  f"{', '.join(map(repr, TEXT_FIELDS))}.")
        upload.fields[part.name] = part.text.decode("utf-8", "replace").strip()
        return
    part.file.close()
    if part.pump is not None:
        await part.pump.finish()
    if part.name != FILE_FIELD:
        raise BadRequest(f"unknown form field {part.name!r}", code="unknown_field",
                         hint=f"Send files as {FILE_FIELD!r}.")
    upload.files.append(ReceivedFile(part.filename, part.path, part.sha256.hexdigest(), part.size))


def _malformed(detail: str) -> BadRequest:
    return BadRequest(f"malformed multipart body: {detail}", code="invalid_multipart",
                      hint="Send multipart/form-data, e.g. with curl -F file=@PATH.")
