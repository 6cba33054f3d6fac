"""Refuse NUL and other control characters in URLs before they reach a handler or the database."""

from __future__ import annotations

import json
import re
from urllib.parse import unquote

from starlette.types import ASGIApp, Receive, Scope, Send

CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class ControlCharacterGuard:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            url = scope["path"] + unquote(scope.get("query_string", b"").decode("latin-1"))
            if CONTROL.search(url):
                await _refuse(send)
                return
        await self.app(scope, receive, send)


async def _refuse(send: Send) -> None:
    body = json.dumps({"error": {
        "code": "invalid_request",
        "message": "the URL contains a control character such as NUL",
        "hint": "Remove control characters from the path and query.",
    }}).encode()
    await send({"type": "http.response.start", "status": 400,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
