"""Checks every refusal test makes: the status, the error code, and the message."""

from __future__ import annotations

import httpx


def assert_refused(response: httpx.Response, status: int, code: str, message: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert message in error["message"]
