"""The promotion state machine. Every state change goes through `transition`.

requested -> awaiting_approval   every gate passed when it was requested
awaiting_approval -> approved    a reviewer who is neither uploader nor requester approved it
awaiting_approval -> rejected    a reviewer rejected it, with a comment
approved -> active               its alias now points at the version (same transaction)
active -> superseded             a later promotion of the same alias became active
active -> rolled_back            a rollback restored the promotion before it
requested -> active              a rollback: it restores an approved version in one call
"""

from __future__ import annotations

from registry.errors import Conflict
from registry.tables import Promotion

REQUESTED, AWAITING, APPROVED, ACTIVE = "requested", "awaiting_approval", "approved", "active"
REJECTED, SUPERSEDED, ROLLED_BACK = "rejected", "superseded", "rolled_back"
PROMOTE, ROLLBACK = "promote", "rollback"

TRANSITIONS: dict[str, frozenset[str]] = {
    REQUESTED: frozenset({AWAITING, ACTIVE}),
    AWAITING: frozenset({APPROVED, REJECTED}),
    APPROVED: frozenset({ACTIVE}),
    ACTIVE: frozenset({SUPERSEDED, ROLLED_BACK}),
    REJECTED: frozenset(),
    SUPERSEDED: frozenset(),
    ROLLED_BACK: frozenset(),
}


def transition(promotion: Promotion, to_state: str) -> None:
    if to_state not in TRANSITIONS[promotion.state]:
        raise Conflict(
            f"promotion {promotion.id} is {promotion.state} and cannot become {to_state}",
            code="invalid_transition",
            hint="Only a promotion awaiting approval can be approved or rejected.")
    if to_state == ACTIVE and promotion.state == REQUESTED and promotion.kind != ROLLBACK:
        raise Conflict(f"promotion {promotion.id} must be approved before it becomes active",
                       code="invalid_transition")
    promotion.state = to_state
