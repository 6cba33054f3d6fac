"""Whether a new engine that a node reports is really the pool's: one node's word never starts a
re-qualification round, since a round marks, evaluates and (under `suspend`) may withhold every
active version of every tenant.

A new engine is confirmed when

- an operator declared it for the pool (`POST /v1/pools/{pool}/engines`), or
- a quorum of the pool's live nodes reports it: a majority of them, and never fewer than two.

Until then it is pending, listed with the nodes that report it, and marks nothing. The pool's
first engine, the one its versions count as qualified on, is confirmed the same way. A pool with
a single node moves to a new engine only by its operator's declaration."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from registry.requalification import repository
from registry.requalification.fingerprints import engine_fingerprint, engine_record
from registry.settings import get_settings
from registry.tables import Pool

MIN_QUORUM = 2


@dataclass(frozen=True)
class Reporters:
    sha256: str
    engine: dict[str, Any]
    nodes: list[str]
    needed: int  # reporting nodes that confirm it

    @property
    def quorum(self) -> bool:
        return len(self.nodes) >= self.needed


def reporters(session: Session, pool: Pool) -> dict[str, Reporters]:
    """Every engine the pool's live nodes report, by fingerprint, with who reports it."""
    since = datetime.now(UTC) - timedelta(seconds=get_settings().node_stale_after_s)
    live = repository.live_engines(session, pool.id, since)
    needed = max(MIN_QUORUM, len(live) // 2 + 1)
    found: dict[str, Reporters] = {}
    for node_id, engine in sorted(live.items()):
        if engine is None:
            continue
        sha = engine_fingerprint(engine)
        if sha not in found:
            found[sha] = Reporters(sha, engine_record(engine), [], needed)
        found[sha].nodes.append(node_id)
    return found


def confirmed_by(session: Session, pool: Pool, sha256: str) -> str | None:
    """Who confirms the engine `sha256` in this pool, in words for the audit; None: nobody yet."""
    if sha256 in (pool.declared_engines or []):
        return "declared by an operator"
    seen = reporters(session, pool).get(sha256)
    if seen is not None and seen.quorum:
        return f"reported by {len(seen.nodes)} of the pool's live nodes ({', '.join(seen.nodes)})"
    return None


def pending(session: Session, pool: Pool) -> list[Reporters]:
    """Engines live nodes report that are neither qualified nor confirmed."""
    settled = {e["sha256"] for e in pool.qualified_engines or []} | set(pool.declared_engines or [])
    return [seen for sha, seen in reporters(session, pool).items()
            if sha not in settled and not seen.quorum]
