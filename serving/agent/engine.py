"""What serves on this node, as the report's `engine`: vLLM's version and the settings the agent
knows. The registry compares it with the engine a version was evaluated on, and a change asks
the pool's active versions to qualify again, so it must say only what is true: a value vLLM
did not give is left out, never guessed."""

from __future__ import annotations

import logging
import re
from typing import Any

from serving.agent.vllm_client import VllmClient, VllmUnavailable

log = logging.getLogger(__name__)
VERSION = re.compile(r"^[A-Za-z0-9.+_-]{1,64}$")  # what the registry accepts


async def describe(vllm: VllmClient, dtype: str | None) -> dict[str, Any] | None:
    """vLLM's part, asked again whenever vLLM comes back (it may have been upgraded). None while
    vLLM cannot say (down, or a version the registry would refuse)."""
    try:
        version = await vllm.version()
        max_model_len = await vllm.max_model_len()
    except VllmUnavailable as error:
        log.info("vLLM's version is not known yet: %s", error)
        return None
    if not VERSION.fullmatch(version):
        log.warning("vLLM reports the version %r, which the registry does not accept; not reported",
                    version[:80])
        return None
    flags = {"max_model_len": max_model_len} if max_model_len is not None else {}
    return {"vllm_version": version, "dtype": dtype, "flags": flags}


def with_limits(engine: dict[str, Any], limits: dict[str, int]) -> dict[str, Any]:
    """The pool's LoRA limits, which the node's vLLM is started with, are engine flags too."""
    return {**engine, "flags": {**engine["flags"], **limits}}
