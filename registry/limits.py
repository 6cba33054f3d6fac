"""Refuse request bodies over the configured size before they are spooled to disk."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from registry.errors import PayloadTooLarge
from registry.metrics import UPLOAD_REFUSALS
from registry.settings import MiB

MULTIPART_OVERHEAD = 1 * MiB
JSON_BODY_LIMIT = 2 * MiB
DRAIN_LIMIT = 64 * MiB  # read and drop this much of a refused body, so the client sees the 413


class BodySizeLimitMiddleware:
    def __init__(self, app: ASGIApp, *, max_upload_bytes: int) -> None:
        self.app = app
        self.max_upload_bytes = max_upload_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        is_upload = scope["method"] == "POST" and scope["path"].endswith("/versions")
        limit = self.max_upload_bytes + MULTIPART_OVERHEAD if is_upload else JSON_BODY_LIMIT
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            if declared <= limit + DRAIN_LIMIT:
                while (await receive()).get("more_body"):
                    pass
            error = self._error(is_upload, declared)
            if is_upload:
                UPLOAD_REFUSALS.labels(reason=error.code).inc()
            await _send_too_large(send, error)
            return
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:
                raise self._error(is_upload, received)
            return message

        await self.app(scope, receive if declared is not None else counting_receive, send)

    def _error(self, is_upload: bool, size: int) -> PayloadTooLarge:
        if is_upload:
            return PayloadTooLarge(
                f"the upload is {size} bytes; the limit is {self.max_upload_bytes}",
                code="upload_too_large",
                hint="Raise LORAPLANE_MAX_UPLOAD_BYTES on the registry, or upload a smaller adapter.",
            )
        return PayloadTooLarge(f"the request body exceeds {JSON_BODY_LIMIT} bytes", code="body_too_large")


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit():
            return int(value)
    return None


async def _send_too_large(send: Send, error: PayloadTooLarge) -> None:
    body = json.dumps(error.body()).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
