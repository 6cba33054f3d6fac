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

