"""What a pool's active set does with versions that re-qualification marked (registry/
requalification marks and clears them): keep serving them, or leave them out until they qualify."""

from __future__ import annotations

from sqlalchemy.orm import Session

from registry.active_set import repository, signed_set
from registry.rows import existing
from registry.tables import Pool

KEEP_SERVING, SUSPEND = "keep_serving", "suspend"
POLICIES = (KEEP_SERVING, SUSPEND)


def suspended_version_ids(session: Session, pool_id: int) -> set[int]:
    """Versions the pool's active set must leave out: marked, under the `suspend` policy, unless
    that would leave the set empty. A round that marks every version (a new engine does) never
    takes the whole pool down at once: they serve, as under keep_serving, until one of them
    qualifies again, and then the others that are still marked leave."""
    if repository.requalify_policy(session, pool_id) != SUSPEND:
        return set()
    marked = repository.marked_version_ids(session, pool_id)
    serving = signed_set.load(existing(session, Pool, pool_id)).version_ids()
    return marked if serving - marked else set()
