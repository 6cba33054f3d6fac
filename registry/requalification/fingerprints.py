"""What identifies an engine, as a digest that compares across processes (a base config's is
base_models.stored_tables.config_digest).

Only what changes how an adapter behaves goes into the engine's fingerprint: the vLLM version,
the dtype and the flags. Where a node runs (its URL) or when it reported does not."""

from __future__ import annotations

import hashlib
from typing import Any

from signed_digests.provenance import canonical

ENGINE_FIELDS = ("vllm_version", "dtype", "flags")


def engine_fields(engine: dict[str, Any]) -> dict[str, Any]:
    return {"vllm_version": engine.get("vllm_version"), "dtype": engine.get("dtype"),
            "flags": dict(engine.get("flags") or {})}


def engine_fingerprint(engine: dict[str, Any]) -> str:
    return hashlib.sha256(canonical(engine_fields(engine))).hexdigest()


def engine_record(engine: dict[str, Any]) -> dict[str, Any]:
    """The engine as a mark or a pool keeps it: its fields and their fingerprint."""
    return {"sha256": engine_fingerprint(engine), **engine_fields(engine)}



def engine_difference(ran_on: dict[str, Any] | None, serves: dict[str, Any]) -> str | None:
    """How the engine an evaluation ran on differs from the engine a pool serves on, in what
    changes an adapter's answers (vLLM's version, and the dtype where both say), or None when
    they agree. Flags are not compared: a worker's and a node's LoRA slots differ by design and
    change no answer. An evaluation that recorded no engine predates engines being kept, and
    is taken as it was."""
    if ran_on is None:
        return None
    if ran_on.get("vllm_version") != serves.get("vllm_version"):
        return f"vLLM {ran_on.get('vllm_version')}, not the pool's {serves.get('vllm_version')}"
    mine, theirs = ran_on.get("dtype"), serves.get("dtype")
    if mine and theirs and "auto" not in (mine, theirs) and mine != theirs:
        return f"dtype {mine}, not the pool's {theirs}"
    return None
