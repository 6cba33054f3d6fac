"""What `loraplane db upgrade` (and `loraplane up`, `loraplane serve` on SQLite) seal once the schema
is current: the active sets of pools made before sets were signed, and the analysis of canaries
started before it was sealed. Each seal is audited. The command line alone runs this, on the
registry host, never a request: it is the one place rows become what is trusted."""

from __future__ import annotations

from registry.active_set.writing import sealing
from registry.unit_of_work import transaction
from registry.promotions import analysis_seals


def seal_in_transaction(*, actor: str, pool_name: str | None = None) -> tuple[list[str], list[int]]:
    """(pools whose active set was signed, canaries whose analysis was sealed)."""
    with transaction() as session:
        pools = sealing.seal(session, actor=actor, pool_name=pool_name)
        canaries = analysis_seals.seal_unsealed(session, actor=actor) if pool_name is None else []
        return pools, canaries
