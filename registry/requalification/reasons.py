"""Why a version was marked, for people and receivers. Tenant-scoped readers learn which flags
changed but not their values: like a node's limits and address, a pool's engine flags are the
operators' business."""

from __future__ import annotations

from typing import Any

from registry.requalification.rules import ENGINE


def public_change(cause: str, before: dict[str, Any] | None, after: dict[str, Any],
                  *, with_flags: bool = False) -> dict[str, Any]:
    if cause != ENGINE:
        return {"cause": cause, "from": before, "to": after}
    return {"cause": cause, "from": _engine(before, with_flags), "to": _engine(after, with_flags),
            "changed_flags": changed_flags(before, after)}


def changed_flags(before: dict[str, Any] | None, after: dict[str, Any]) -> list[str]:
    old, new = (before or {}).get("flags") or {}, after.get("flags") or {}
    return sorted(name for name in old.keys() | new.keys() if old.get(name) != new.get(name))


def reason_text(cause: str, before: dict[str, Any] | None, after: dict[str, Any]) -> str:
    if cause != ENGINE:
        old = (before or {}).get("config_sha256")
        return (f"the base model's config changed: digest {_short(old)} → "
                f"{_short(after.get('config_sha256'))}")
    text = f"the engine changed: {_engine_text(before)} → {_engine_text(after)}"
    flags = changed_flags(before, after)
    return text + (f"; flags changed: {', '.join(flags)}" if flags else "")


def _engine(record: dict[str, Any] | None, with_flags: bool) -> dict[str, Any] | None:
    if record is None:
        return None
    shown = {key: record.get(key) for key in ("sha256", "vllm_version", "dtype")}
    return {**shown, "flags": record.get("flags") or {}} if with_flags else shown


def _engine_text(record: dict[str, Any] | None) -> str:
    if record is None:
        return "none recorded"
    dtype = f", {record['dtype']}" if record.get("dtype") else ""
    return f"vLLM {record.get('vllm_version')}{dtype} ({_short(record.get('sha256'))})"


def _short(digest: str | None) -> str:
    return f"{digest[:12]}…" if digest else "none recorded"
