"""One error hierarchy: each domain error carries its HTTP status, code, message and hint, and
the response headers that belong to it (Retry-After, Connection: close)."""

from __future__ import annotations

from collections.abc import Mapping


class LoraplaneError(Exception):
    status = 400
    code = "bad_request"
    headers: Mapping[str, str] = {}

    def __init__(self, message: str, *, hint: str = "", code: str | None = None,
                 details: list[dict] | None = None, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = details
        if code is not None:
            self.code = code
        if headers is not None:
            self.headers = {**self.headers, **headers}

    def body(self) -> dict:
        error: dict[str, object] = {"code": self.code, "message": self.message, "hint": self.hint}
        if self.details is not None:
            error["details"] = self.details
        return {"error": error}


class BadRequest(LoraplaneError):
    status, code = 400, "bad_request"


class Unauthorized(LoraplaneError):
    status, code = 401, "unauthorized"


class Forbidden(LoraplaneError):
    status, code = 403, "forbidden"


class NotFound(LoraplaneError):
    status, code = 404, "not_found"


class Conflict(LoraplaneError):
    status, code = 409, "conflict"


class PayloadTooLarge(LoraplaneError):
    status, code = 413, "payload_too_large"


class UnsupportedMediaType(LoraplaneError):
    status, code = 415, "unsupported_media_type"


class Unprocessable(LoraplaneError):
    status, code = 422, "invalid"


class TooManyRequests(LoraplaneError):
    status, code = 429, "quota_exceeded"


class Unavailable(LoraplaneError):
    status, code = 503, "unavailable"
