"""One attack of the catalogue, and what came of it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bench.trust_attacks.world import World


@dataclass(frozen=True)
class Outcome:
    succeeded: bool
    detail: str


@dataclass(frozen=True)
class Attack:
    credential: str
    name: str
    run: Callable[[World], Outcome]
    # A hole known and not closed yet: the catalogue still runs it and reports it as it is.
    open_because: str | None = None
