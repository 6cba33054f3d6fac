"""Refuse request bodies over the configured size before they are spooled to disk."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from registry.errors import PayloadTooLarge
from registry.metrics import UPLOAD_REFUSALS
from registry.settings import MiB

MULTIPART_OVERHEAD = 1 * MiB
JSON_BODY_LIMIT = 2 * MiB
DRAIN_LIMIT = 8 * MiB  # read and drop this much of a refused body, so the client sees the 413


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
        if declared is not None:
            await self.app(scope, receive, send)  # the server holds the body to its length
        elif is_upload:
            await self.app(scope, self._counting(receive, limit), send)
        else:
            await self._buffered(scope, receive, send, limit)

    def _counting(self, receive: Receive, limit: int) -> Receive:
        """Raise as soon as a streamed body passes the limit; the upload route answers 413."""
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:
                raise self._error(True, received)
            return message

        return counting_receive

    async def _buffered(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        """A small chunked body is read whole first, so a 413 is never lost in body parsing."""
        messages, received = [], 0
        while True:
            message = await receive()
            messages.append(message)
            received += len(message.get("body", b""))
            if received > limit:
                await _send_too_large(send, self._error(False, received))
                return
            if message["type"] != "http.request" or not message.get("more_body"):
                break

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)

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
