"""Odd requests get a clear 4xx, never a 500: keys that are not ASCII, bodies nested too deeply,
and the same bad key again and again (each refusal a fresh error, so none grows a traceback)."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from serving.router.app_keys import AppKeys
from serving.router.errors import RouterError
from serving.router.requests import json_body


def refusal(coroutine) -> RouterError:
    with pytest.raises(RouterError) as refused:
        asyncio.run(coroutine)
    return refused.value


def test_a_key_that_is_not_ascii_is_refused_without_asking_the_registry():
    keys = AppKeys("http://127.0.0.1:9", ttl_s=10)  # nothing listens: asking would give 503
    error = refusal(keys.authenticate("Bearer lpt_\u00e9t\u00e9"))
    assert (error.status, error.code, error.message) == (401, "missing_api_key", "missing or malformed API key")


def test_a_body_nested_too_deeply_is_refused():
    body = b"[" * 200_000

    async def read() -> dict:
        messages = [{"type": "http.request", "body": body, "more_body": False}]
        return await json_body({"headers": []}, lambda: _pop(messages), limit=1 << 20)

    error = refusal(read())
    assert (error.status, error.code, error.message) == (400, "invalid_json", "the body is nested too deeply")


async def _pop(messages: list[dict]) -> dict:
    return messages.pop()


def test_a_remembered_refusal_is_raised_fresh_each_time():
    keys = AppKeys("http://127.0.0.1:9", ttl_s=10)
    remembered = RouterError(401, "invalid_api_key", "invalid or revoked API key", "hint")
    keys._refused[hashlib.sha256(b"Bearer lpt_bad").digest()] = remembered
    first, second = (refusal(keys.authenticate("Bearer lpt_bad")) for _ in range(2))
    assert first is not remembered and second is not first
    assert (second.status, second.code) == (401, "invalid_api_key") and remembered.__traceback__ is None
