"""The router's refusals, rendered in the OpenAI error shape so that client libraries raise the
right exception, with a hint on how to fix the request."""

from __future__ import annotations

import json
from typing import Any

TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
         404: "not_found_error", 413: "invalid_request_error", 429: "rate_limit_error"}


class RouterError(Exception):
    def __init__(self, status: int, code: str, message: str, hint: str = "", *,
                 retry_after_s: int | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.hint = status, code, message, hint
        self.retry_after_s = retry_after_s
        self.extra = extra
        self.served_name = self.alias = ""  # set once the model resolved, for metrics

    def copy(self) -> RouterError:
        return RouterError(self.status, self.code, self.message, self.hint,
                           retry_after_s=self.retry_after_s, **self.extra)

    def body(self) -> bytes:
        error = {"message": self.message, "type": TYPES.get(self.status, "server_error"),
                 "code": self.code, "param": "model" if "model" in self.code else None,
                 "hint": self.hint, **self.extra}
        return json.dumps({"error": error}).encode()

    def headers(self) -> list[tuple[bytes, bytes]]:
        headers = [(b"content-type", b"application/json")]
        if self.retry_after_s is not None:
            headers.append((b"retry-after", str(self.retry_after_s).encode()))
        if self.status == 401:
            headers.append((b"www-authenticate", b"Bearer"))
        return headers
