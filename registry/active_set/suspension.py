"""What a pool's active set does with versions that re-qualification marked (registry/
requalification marks and clears them): keep serving them, or leave them out until they qualify."""

from __future__ import annotations

from sqlalchemy.orm import Session

from registry.active_set import repository

KEEP_SERVING, SUSPEND = "keep_serving", "suspend"
POLICIES = (KEEP_SERVING, SUSPEND)


def suspended_version_ids(session: Session, pool_id: int) -> set[int]:
    """Versions the pool's active set must leave out: marked, under the `suspend` policy."""
    policy = repository.requalify_policy(session, pool_id)
    return repository.marked_version_ids(session, pool_id) if policy == SUSPEND else set()
