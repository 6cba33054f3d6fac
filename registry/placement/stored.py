"""The placement as the pool row keeps it (`Pool.placement`), and back. Pure: no database.

What is stored is the assignments, not the shares (which move with every report). While every
node holds everything, nothing more: nodes coming and going change nothing."""

from __future__ import annotations

from registry.placement.rules import EVERYWHERE, Placement

EVERYWHERE_STORED = {"mode": EVERYWHERE, "targets": {}, "draining": {}, "unplaced": []}


def as_stored(data: dict | None) -> dict:
    """A pool never placed is placed everywhere."""
    return data or EVERYWHERE_STORED


def to_stored(placement: Placement) -> dict:
    if placement.mode == EVERYWHERE:
        return EVERYWHERE_STORED
    return {"mode": placement.mode,
            "targets": {node: sorted(names) for node, names in sorted(placement.targets.items())},
            "draining": {node: sorted(names) for node, names in sorted(placement.draining.items()) if names},
            "unplaced": list(placement.unplaced)}


def from_stored(data: dict | None) -> Placement | None:
    if not data:
        return None
    targets = {node: frozenset(names) for node, names in data["targets"].items()}
    names = {name for held in targets.values() for name in held} | set(data["unplaced"])
    replicas = {name: sum(name in held for held in targets.values()) for name in names}
    return Placement(data["mode"], targets, replicas, {}, tuple(data["unplaced"]),
                     {node: frozenset(names) for node, names in data["draining"].items()})
