"""A change to a pool's active set, from its new generation to the placement that goes with it.

A change begins by bumping the pool's generation, and so takes the pool row's lock: changes to one
pool run one at a time, and a reader that locks the row for share sees a generation and entries
that belong together. The new generation is announced once the transaction commits (the unit of
work sends it, registry/unit_of_work.py).

What the pool serves is its signed set (signed_set.py): a change starts from the last one, as
verified, applies its own operations to it (`change.signed`, through changes.py), and `finish()`
signs the result with its generation and places it on the pool's nodes (placing.py), in the same
transaction, so that nodes told the new generation also find where its adapters live. A pool
whose signed set does not verify takes no change (503) until an operator has checked and sealed
it again. A unit of work refuses to commit a change begun and not finished.

    change = ActiveSetChange.begin(session, pool_id)
    ...point or drop aliases, retire versions (changes.py), passing the change...
    change.finish()
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy.orm import Session

from registry import pending_work
from registry.active_set import repository, signed_set
from registry.active_set.writing import placing
from registry.active_set.writing import announcements
from registry.rows import existing
from registry.tables import Pool

log = logging.getLogger(__name__)


@dataclass
class ActiveSetChange:
    session: Session
    pool: Pool
    generation: int
    signed: signed_set.SignedSet

    @property
    def pool_id(self) -> int:
        return self.pool.id

    @classmethod
    def begin(cls, session: Session, pool_id: int) -> ActiveSetChange:
        """Bump the pool's generation (its lock), and start from its last signed set."""
        generation, _ = repository.bump_generation(session, pool_id)
        pool = repository.pool_for_change(session, pool_id)
        signed = signed_set.load(pool, generation=generation - 1, locked=True)
        pending_work.of(session).open_changes.add(pool_id)
        return cls(session, pool, generation, signed)

    def finish(self) -> None:
        """Sign the set as the change left it, write the alias rows from it, place it, and have
        the new generation announced at the commit."""
        self.signed.generation = self.generation
        signed_set.sign(self.pool, self.signed)
        if repaired := repository.project_aliases(self.session, self.pool_id, list(self.signed.aliases.values())):
            log.error("pool %s: %d alias rows differed from its signed set, and were put back",
                      self.pool.name, repaired)
        placing.store_if_moved(self.session, self.pool_id)
        announcements.generation_bumped(self.session, self.pool.name, self.generation)
        pending_work.of(self.session).open_changes.discard(self.pool_id)


def new_generation(session: Session, pool_id: int) -> int:
    """For a change already made through other rows (versions suspended or restored, new
    signatures, edited digests): a new generation, and the placement that follows."""
    change = ActiveSetChange.begin(session, pool_id)
    change.finish()
    return change.generation


def follow_nodes(session: Session, pool_id: int) -> bool:
    """A node joined, left or finished loading what another drains, or traffic moved: when the
    placement should move with it, that is a change of its own. True if it moved."""
    pool = existing(session, Pool, pool_id)
    if not placing.differs(session, pool):  # most reports: heartbeats
        return False
    # Again under the pool's lock, so that two reports racing do not bump the generation twice
    # for one move.
    repository.lock_pool(session, pool_id)
    session.refresh(pool)
    if not placing.differs(session, pool):
        return False
    ActiveSetChange.begin(session, pool_id).finish()  # finishing it stores the placement that differs
    return True
