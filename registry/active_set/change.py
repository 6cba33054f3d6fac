"""A change to a pool's active set, from its new generation to the placement that goes with it.

Every change bumps the pool's generation first, and so takes the pool row's lock: changes to one
pool run one at a time, a reader that locks the row for share sees a generation and entries that
belong together, and the new generation is announced only once the transaction commits. When the
change is done, the set is placed on the pool's nodes again (placing.py), in the same
transaction, so that nodes told the new generation also find where its adapters live.

What the pool serves is its signed set (signed_set.py): a change starts from the last one, as
verified, applies its own operations to it (`change.signed`, through changes.py), and signs the
result with its generation as it finishes. A pool whose signed set does not verify takes no
change (503) until an operator has checked and sealed it again.

    with ActiveSetChange(session, pool_id) as change:
        ...point or drop aliases, retire versions (changes.py), passing the change...
"""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from registry.active_set import placing, repository, signed_set
from registry.active_set.announcements import announce
from registry.tables import Pool

log = logging.getLogger(__name__)


class ActiveSetChange:
    def __init__(self, session: Session, pool_id: int) -> None:
        self.session, self.pool_id = session, pool_id
        self.generation, pool_name = repository.bump_generation(session, pool_id)
        self.pool = repository.pool_for_change(session, pool_id)
        self.signed = signed_set.load(self.pool, generation=self.generation - 1, locked=True)
        announce(session, {"kind": "generation", "pool": pool_name, "generation": self.generation})

    def __enter__(self) -> ActiveSetChange:
        return self

    def __exit__(self, error_type, error, traceback) -> None:
        if error_type is None:  # a change that failed is rolled back with its transaction
            self.finish()

    def finish(self) -> None:
        """Sign the set as the change left it, and place it."""
        self.signed.generation = self.generation
        signed_set.sign(self.pool, self.signed)
        if repaired := repository.project_aliases(self.session, self.pool_id, list(self.signed.aliases.values())):
            log.error("pool %s: %d alias rows differed from its signed set, and were put back",
                      self.pool.name, repaired)
        placing.store_if_moved(self.session, self.pool_id)


def new_generation(session: Session, pool_id: int) -> int:
    """For a change already made through other rows (versions suspended or restored, new
    signatures, edited digests): a new generation, and the placement that follows."""
    with ActiveSetChange(session, pool_id) as change:
        return change.generation


def follow_nodes(session: Session, pool_id: int) -> bool:
    """A node joined, left or finished loading what another drains, or traffic moved: when the
    placement should move with it, that is a change of its own. True if it moved."""
    pool = session.get(Pool, pool_id)
    if not placing.differs(session, pool):  # most reports: heartbeats
        return False
    # Again under the pool's lock, so that two reports racing do not bump the generation twice
    # for one move.
    repository.lock_pool(session, pool_id)
    session.refresh(pool)
    if not placing.differs(session, pool):
        return False
    with ActiveSetChange(session, pool_id):
        pass  # finishing it stores the placement that differs
    return True
