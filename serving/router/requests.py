"""Reading a client's request: its headers, its tier, and a JSON body of bounded size."""

from __future__ import annotations

import json
from typing import Any

from starlette.types import Receive, Scope

from serving.router.admission import BATCH, INTERACTIVE
from serving.router.app_keys import App
from serving.router.errors import RouterError

TIER_HEADER = b"x-loraplane-tier"


def header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


def tier_of(app: App, scope: Scope) -> str:
    """The key's tier, or batch when the header asks for it. A header cannot raise a batch key
    to interactive: the key's owner chose batch for it."""
    asked = header(scope, TIER_HEADER)
    if asked is None or asked == app.tier:
        return app.tier
    if asked == BATCH:
        return BATCH
    if asked == INTERACTIVE:
        raise RouterError(403, "tier_not_allowed", "this app key is limited to the batch tier",
                          "Drop the X-Loraplane-Tier header, or use an interactive app key.")
    raise RouterError(400, "invalid_tier", f"unknown tier {asked[:40]!r} in X-Loraplane-Tier",
                      "Use interactive or batch.")


async def json_body(scope: Scope, receive: Receive, limit: int) -> dict[str, Any]:
    declared = header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks, size, more = [], 0, True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise RouterError(400, "client_disconnected", "the client went away", "")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
        more = message.get("more_body", False)
    try:
        body = json.loads(b"".join(chunks))
    except (ValueError, UnicodeDecodeError) as error:
        raise RouterError(400, "invalid_json", f"the body is not valid JSON: {error}",
                          "Send a JSON object, as the OpenAI API expects.") from None
    except RecursionError:
        raise RouterError(400, "invalid_json", "the body is nested too deeply",
                          "Send a JSON object, as the OpenAI API expects.") from None
    if not isinstance(body, dict):
        raise RouterError(400, "invalid_json", "the body must be a JSON object",
                          "Send a JSON object, as the OpenAI API expects.")
    return body


# Fields of vLLM's own that reach into the engine (KV transfer, extension arguments): an
# application has no business setting them through the router.
ENGINE_INTERNAL_FIELDS = ("kv_transfer_params", "vllm_xargs")
MAX_CHOICES = 16  # n and best_of: each choice is a whole sequence the node must generate


def check_fields(body: dict[str, Any]) -> None:
    for name in ENGINE_INTERNAL_FIELDS:
        if name in body:
            raise RouterError(400, "field_not_allowed", f"{name!r} is not accepted by the router",
                              "Drop it: it reaches into the engine, not the model.")
    for name in ("n", "best_of"):
        value = body.get(name)
        if value is not None and (type(value) is not int or not 1 <= value <= MAX_CHOICES):
            raise RouterError(400, "invalid_request", f"{name} must be a whole number from 1 to "
                              f"{MAX_CHOICES}", "Ask for fewer choices, or send several requests.")


def wants_prompt_logprobs(body: dict[str, Any]) -> bool:
    # Chat with echo sets prompt logprobs in vLLM even without `logprobs` (top_logprobs defaults
    # to 0), so any echo counts.
    return bool(body.get("echo")) or body.get("prompt_logprobs") is not None


def _too_large(limit: int) -> RouterError:
    return RouterError(413, "body_too_large", f"the body is larger than {limit} bytes",
                       "Send a shorter prompt, or raise LORAPLANE_ROUTER_MAX_BODY_BYTES.")
