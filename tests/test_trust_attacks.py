"""The authorization and hostile-input checks for every credential kind at once: what a leaked
node token, router token, app key, tenant admin, uploader or reviewer, and a database writer
without the registry host's keys, attempts against the real registry and router, and that it
does not get its way (bench/trust_attacks; bench/trust.py counts the same catalogue).

Each attack says what the attacker wanted and checks that, not a status code alone. The attacks
run in the catalogue's order on one world: each leaves it as it found it, or as the next expects.
A hole known and not closed yet is an expected failure that fails the suite once it is closed,
so that it is then moved among the refused."""

from __future__ import annotations

import pytest

from bench.trust_attacks.attack import Attack
from bench.trust_attacks.catalogue import catalogue
from bench.trust_attacks.world import World, build


@pytest.fixture(scope="module")
def world(registry, engine, tokens, service_dir) -> World:
    world, started = build(registry.url, engine, tokens["global_admin"], service_dir / "trust")
    yield world
    world.impostor.__exit__()
    world.close()
    for service in started:
        service.stop()


def cases() -> list:
    return [pytest.param(attack, id=f"{attack.credential}-{attack.name}", marks=[
        pytest.mark.xfail(strict=True, reason=f"open: {attack.open_because}")] if attack.open_because else [])
        for attack in catalogue()]


@pytest.mark.parametrize("attack", cases())
def test_one_credential_alone_does_not_get_its_way(world: World, attack: Attack):
    outcome = attack.run(world)
    assert not outcome.succeeded, f"{attack.credential} {attack.name}: {outcome.detail}"
