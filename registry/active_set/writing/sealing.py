"""Sign a pool's active set from its rows: once for pools made before active sets were signed
(`loraplane db upgrade` does it as it migrates), and by an operator who checked the rows of a
pool whose signed set no longer verifies, or restored the database from a backup
(`loraplane db seal-active-sets --pool NAME`).

This is the one place rows become the source of what a pool serves, so it runs only from the
registry host's command line, never from a request, and every seal is audited with what it signed."""

from __future__ import annotations

from sqlalchemy.orm import Session

from registry import audit
from registry.active_set import repository, signed_set
from registry.active_set.writing import announcements
from registry.pool_lookup import pool_by_name
from registry.tables import Pool

MAX_GENERATION_JUMP = 1_000_000  # a node's report beyond this is not believed


def seal(session: Session, *, actor: str, pool_name: str | None = None) -> list[str]:
    """Seal the named pool, or every pool without a signed set. Returns the pools sealed."""
    pools = ([pool_by_name(session, pool_name)] if pool_name is not None
             else repository.unsigned_pools(session))
    for pool in pools:
        _seal_one(session, pool, actor)
    return [pool.name for pool in pools]


def _seal_one(session: Session, pool: Pool, actor: str) -> None:
    generation, name = repository.bump_generation(session, pool.id)  # takes the pool's lock
    pool = repository.pool_for_change(session, pool.id)
    # After a restore from a backup, nodes hold newer generations than the database: they take
    # no set older than theirs, so the seal goes past what they report (within reason).
    reported = max((n.generation for n in repository.node_statuses(session, pool.id)
                    if n.generation <= generation + MAX_GENERATION_JUMP), default=0)
    if reported >= generation:
        pool.generation = generation = reported + 1
    signed = signed_set.from_rows(session, pool)
    signed_set.sign(pool, signed)
    audit.record(session, actor=actor, action="pool.active_set.sealed", subject=f"pool/{name}",
                 after={"generation": generation,
                        "aliases": [{"served_name": a.served_name, "alias": a.alias, "weight": a.weight}
                                    for a in signed.aliases.values()],
                        "retiring": sorted(r.served_name for r in signed.retiring.values())})
    announcements.generation_bumped(session, name, generation)
