"""Every attack, in the order they run on one world."""

from __future__ import annotations

from bench.trust_attacks import by_database, by_fleet, by_people
from bench.trust_attacks.attack import Attack


def catalogue() -> list[Attack]:
    return [*by_fleet.ATTACKS, *by_people.ATTACKS, *by_database.ATTACKS]
