"""Odd requests get a clear 4xx, never a 500, and cost the registry little: values that cannot be
keys are refused without asking it, a flood of made-up keys is checked a few at a time, the same
bad key again and again is remembered (each refusal a fresh error, so none grows a traceback),
and bodies nested too deeply are refused."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from serving.router.app_keys import MAX_LOOKUPS, AppKeys
from serving.router.errors import RouterError
from serving.router.requests import check_fields, json_body, wants_prompt_logprobs


@contextlib.asynccontextmanager
async def stand_in_registry(whoami) -> AsyncIterator[str]:
    """A small server answering /v1/whoami with `whoami`, for what the real registry cannot show
    or do on demand (how many checks it holds at once; stalling); yields its URL."""
    registry = web.Application()
    registry.router.add_get("/v1/whoami", whoami)
    runner = web.AppRunner(registry)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    finally:
        await runner.cleanup()


def refusal(coroutine) -> RouterError:
    with pytest.raises(RouterError) as refused:
        asyncio.run(coroutine)
    return refused.value


@pytest.mark.parametrize("authorization", [
    "Bearer lpt_\u00e9t\u00e9", "Bearer lpt_short", "Bearer xyz_" + "a" * 43, "Basic lpt_" + "a" * 43,
    "Bearer lpt_" + "a" * 42 + "!", "Bearer lpt_" + "a" * 44, "",
])
def test_a_value_that_cannot_be_a_key_is_refused_without_asking_the_registry(authorization):
    keys = AppKeys("http://127.0.0.1:9", ttl_s=10)  # nothing listens: asking would give 503
    error = refusal(keys.authenticate(authorization))
    assert (error.status, error.code, error.message) == (401, "missing_api_key", "missing or malformed API key")
    assert not keys._lookups and not keys._apps


def test_a_flood_of_made_up_keys_is_checked_a_few_at_a_time_and_then_remembered():
    # The registry's side is a small HTTP server that refuses every key slowly and counts how
    # many checks it holds at once, which the real registry does not report.
    asking = {"now": 0, "most": 0, "total": 0}

    async def whoami(_request: web.Request) -> web.Response:
        asking["now"] += 1
        asking["total"] += 1
        asking["most"] = max(asking["most"], asking["now"])
        await asyncio.sleep(0.02)  # slowly, so that the checks overlap and the cap shows
        asking["now"] -= 1
        return web.json_response({"detail": "invalid token"}, status=401)

    async def scenario() -> list:
        async with stand_in_registry(whoami) as url:
            keys = AppKeys(url, ttl_s=10)
            made_up = [f"Bearer lpt_{secrets.token_urlsafe(32)}" for _ in range(100)]
            try:
                first = await asyncio.gather(*(keys.authenticate(k) for k in made_up), return_exceptions=True)
                again = await asyncio.gather(*(keys.authenticate(k) for k in made_up), return_exceptions=True)
            finally:
                await keys.close()
        return first + again

    errors = asyncio.run(scenario())
    assert all(isinstance(e, RouterError) and (e.status, e.code) == (401, "invalid_api_key") for e in errors)
    assert asking["total"] == 100 and asking["most"] == MAX_LOOKUPS  # again: remembered, not asked


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
    bad_key = "Bearer lpt_" + "b" * 43
    keys._refused[hashlib.sha256(bad_key.encode()).digest()] = remembered
    first, second = (refusal(keys.authenticate(bad_key)) for _ in range(2))
    assert first is not remembered and second is not first
    assert (second.status, second.code) == (401, "invalid_api_key") and remembered.__traceback__ is None


def test_key_checks_that_wait_too_long_for_the_registry_get_503_instead_of_queueing_forever():
    # The registry's side is a server that never answers, as a registry stalled by a flood would.
    release = None

    async def stalled(_request: web.Request) -> web.Response:
        await release.wait()
        return web.json_response({})

    async def scenario() -> list:
        nonlocal release
        release = asyncio.Event()
        async with stand_in_registry(stalled) as url:
            keys = AppKeys(url, ttl_s=10, timeout_s=0.3)
            made_up = [f"Bearer lpt_{secrets.token_urlsafe(32)}" for _ in range(MAX_LOOKUPS * 2)]
            try:
                return await asyncio.wait_for(asyncio.gather(
                    *(keys.authenticate(k) for k in made_up), return_exceptions=True), 5)
            finally:
                release.set()
                await keys.close()

    errors = asyncio.run(scenario())
    assert all(isinstance(e, RouterError) and (e.status, e.code, e.message) == (
        503, "registry_unavailable", "cannot check the API key: the registry did not answer in time")
        for e in errors), errors[:3]


@pytest.mark.parametrize(("body", "code", "message"), [
    ({"kv_transfer_params": {"do_remote_prefill": True}}, "field_not_allowed",
     "'kv_transfer_params' is not accepted by the router"),
    ({"vllm_xargs": {"x": 1}}, "field_not_allowed", "'vllm_xargs' is not accepted by the router"),
    ({"n": 5000}, "invalid_request", "n must be a whole number from 1 to 16"),
    ({"n": True}, "invalid_request", "n must be a whole number from 1 to 16"),
    ({"best_of": 0}, "invalid_request", "best_of must be a whole number from 1 to 16"),
])
def test_engine_internals_and_runaway_choices_are_refused_before_any_node(body, code, message):
    with pytest.raises(RouterError) as refused:
        check_fields({"model": "acme/x", "prompt": "hi", **body})
    assert (refused.value.status, refused.value.code, refused.value.message) == (400, code, message)


def test_echo_counts_as_prompt_logprobs_even_without_logprobs():
    """vLLM's chat endpoint computes prompt logprobs whenever echo is set (top_logprobs
    defaults to 0), so such requests take turns like any other prompt-logprob request."""
    assert wants_prompt_logprobs({"messages": [], "echo": True})
    assert wants_prompt_logprobs({"prompt": "x", "prompt_logprobs": 0})
    assert not wants_prompt_logprobs({"prompt": "x", "logprobs": 1})
    check_fields({"model": "acme/x", "n": 16, "best_of": 1})  # within bounds: accepted
