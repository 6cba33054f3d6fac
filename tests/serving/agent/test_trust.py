"""The node's trust bundle: the first one its registry publishes is pinned, and after that only a
bundle signed by a key the node already trusts, of a version not older, replaces it; an operator's
file replaces the registry's word altogether. The registry is a stand-in serving a bundle over
real HTTP, read through the agent's own registry client."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from serving.agent.trust import TrustStore
from serving.registry_client import RegistryClient
from tests.serving.agent.signing import Key, bundle
from tests.serving.agent.stand_ins import POOL, StandInRegistry


@pytest.fixture
def registry():
    served = StandInRegistry(POOL, [])
    yield served
    served.close()


def node_trust(registry: StandInRegistry, state: Path, operator_file: Path | None = None) -> TrustStore:
    """The agent's trust store on `state`, as a restarted agent builds it (load, then refresh)."""
    async def fetch() -> dict:
        client = RegistryClient(registry.url, "node-token", POOL, timeout_s=5)  # one per event loop
        try:
            return await client.trust_bundle()
        finally:
            await client.close()

    trust = TrustStore(pinned=state / "trust-bundle.json", operator_file=operator_file, fetch=fetch)
    trust.load()
    return trust


def refresh(trust: TrustStore) -> bool:
    return asyncio.run(trust.refresh())


def test_the_first_bundle_is_pinned_and_a_rotation_signed_by_a_trusted_key_is_taken(registry, tmp_path):
    old, new = Key(), Key()
    registry.bundle = bundle(old)
    trust = node_trust(registry, tmp_path)

    assert refresh(trust) is True
    assert set(trust.bundle.keys) == {old.key_id}
    assert json.loads((tmp_path / "trust-bundle.json").read_text()) == registry.bundle
    registry.bundle = bundle(old)  # stamped and signed anew, saying the same
    assert refresh(trust) is False

    registry.bundle = bundle(old, new, version=2)  # the registry rotated: both keys for a while
    assert refresh(trust) is True
    assert (trust.bundle.version, set(trust.bundle.keys)) == (2, {old.key_id, new.key_id})
    assert json.loads((tmp_path / "trust-bundle.json").read_text()) == registry.bundle

    registry.bundle = bundle(new, version=3)  # the old key retired: signed by the new one alone
    assert refresh(trust) is True
    assert set(trust.bundle.keys) == {new.key_id}


def test_a_bundle_no_trusted_key_signed_is_refused_and_the_pin_stays(registry, tmp_path):
    trusted, foreign = Key(), Key()
    registry.bundle = bundle(trusted)
    trust = node_trust(registry, tmp_path)
    refresh(trust)
    pinned = (tmp_path / "trust-bundle.json").read_text()

    registry.bundle = bundle(foreign, version=2)  # a registry that publishes keys of its own choosing

    assert refresh(trust) is False
    assert set(trust.bundle.keys) == {trusted.key_id}
    assert trust.problem == ("refused the registry's trust bundle: the new trust bundle is not signed "
                             "by any key the node already trusts")
    assert (tmp_path / "trust-bundle.json").read_text() == pinned

    restarted = node_trust(registry, tmp_path)  # the pin outlives the agent
    assert refresh(restarted) is False
    assert set(restarted.bundle.keys) == {trusted.key_id}


def test_an_older_bundle_is_refused_though_a_trusted_key_signed_it(registry, tmp_path):
    old, new = Key(), Key()
    registry.bundle = bundle(old, new, version=2)
    trust = node_trust(registry, tmp_path)
    refresh(trust)

    registry.bundle = bundle(old, version=1)  # replayed from before the rotation

    assert refresh(trust) is False
    assert trust.problem == ("refused the registry's trust bundle: the trust bundle is version 1, older "
                             "than the trusted version 2")
    assert (trust.bundle.version, set(trust.bundle.keys)) == (2, {old.key_id, new.key_id})


def test_a_rotation_signed_only_by_a_key_whose_trust_ended_is_refused(registry, tmp_path):
    retired, current, foreign = Key(), Key(), Key()
    ended = datetime.now(UTC) - timedelta(seconds=1)
    registry.bundle = bundle(retired, current, not_after={retired.key_id: ended})
    trust = node_trust(registry, tmp_path)
    refresh(trust)

    # Whoever still holds the retired key (stolen after its retirement, say) cannot rotate the node.
    registry.bundle = bundle(retired, foreign, version=2)

    assert refresh(trust) is False
    assert set(trust.bundle.keys) == {retired.key_id, current.key_id}


def test_an_operators_file_is_the_only_word_and_is_read_again_when_it_changes(registry, tmp_path):
    first, second = Key(), Key()
    operator_file = tmp_path / "operator" / "trust.json"
    operator_file.parent.mkdir()
    operator_file.write_text(json.dumps(bundle(first)))
    trust = node_trust(registry, tmp_path, operator_file=operator_file)
    assert set(trust.bundle.keys) == {first.key_id}  # read at start, before any refresh

    assert refresh(trust) is False  # unchanged
    operator_file.write_text(json.dumps(bundle(second, version=1)))  # not signed by `first`: the operator's call
    assert refresh(trust) is True

    assert set(trust.bundle.keys) == {second.key_id}
    assert registry.bundle_requests == 0
    assert not (tmp_path / "trust-bundle.json").exists()


def test_a_damaged_pin_is_never_replaced_by_the_registrys_word(registry, tmp_path):
    (tmp_path / "trust-bundle.json").write_text('{"payloadType": "application/vnd.loraplane.trust-bundle+json"}')
    trust = node_trust(registry, tmp_path)

    assert refresh(trust) is False

    assert trust.bundle is None and trust.pin_damaged
    assert trust.problem == "the pinned trust bundle does not verify (the envelope carries no signature)"
    assert registry.bundle_requests == 0


def test_a_rotated_out_key_cannot_take_its_trust_back_during_the_overlap(registry, tmp_path):
    retired, current, attacker = Key(), Key(), Key()
    ends = datetime.now(UTC) + timedelta(days=7)  # still trusted: the overlap runs
    registry.bundle = bundle(retired, current, version=2, not_after={retired.key_id: ends})
    trust = node_trust(registry, tmp_path)
    refresh(trust)

    # Whoever holds the retired key (the reason for the rotation, often) answers in the registry's
    # place with that key back for good, a key of their own, and without the current one.
    registry.bundle = bundle(retired, attacker, version=3)
    assert refresh(trust) is False
    assert trust.problem == ("refused the registry's trust bundle: the new trust bundle is not signed "
                             "by any key the node already trusts")

    # Signed by the current key too, it still may not move the end of the retired key's trust.
    registry.bundle = bundle(retired, current, version=3, not_after={retired.key_id: ends + timedelta(days=1)})
    assert refresh(trust) is False
    assert trust.problem.endswith(f"moves the end of trust of key {retired.key_id[:16]}…")

    # Nor may the same version list other keys.
    registry.bundle = bundle(retired, current, attacker, version=2, not_after={retired.key_id: ends},
                             signed_by=(retired, current, attacker))
    assert refresh(trust) is False
    assert trust.problem.endswith("changes its keys without a new version (2)")
    assert set(trust.bundle.keys) == {retired.key_id, current.key_id}
