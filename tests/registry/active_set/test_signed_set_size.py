"""A pool's signed active set grows with its versions, past the 512 KiB that bounds attestations
and trust bundles: nodes accept it up to MAX_ACTIVE_SET_BYTES, and the registry refuses a change
that would sign a larger one (409) rather than sign a set every node would refuse, leaving the
pool's set as it was."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from registry.active_set import signed_set
from registry.errors import Conflict
from registry.settings import get_settings
from registry.tables import Pool
from serving.agent.signed_sets import signed_names
from signed_digests import provenance
from tests.serving.agent.signing import REGISTRY_KEY, bundle, sign_set

pytestmark = pytest.mark.fast


def versions(count: int) -> list[dict]:
    return [{"served_name": f"acme/adapter-{i:06d}@1", "digest": f"{i:064x}"} for i in range(count)]


def test_a_set_of_thousands_of_versions_verifies_on_a_node():
    entries = versions(3000)
    signed = sign_set("long-tail", entries, 7)
    assert len(provenance.canonical(signed)) > provenance.MAX_ENVELOPE_BYTES

    trusted = provenance.TrustBundle.parse(bundle(REGISTRY_KEY))
    assert signed_names(trusted, signed) == {(e["served_name"], e["digest"]) for e in entries}


def test_an_attestation_is_still_bounded_at_512_kib():
    trusted = provenance.TrustBundle.parse(bundle(REGISTRY_KEY))
    statement = provenance.statement("acme/a@1", "0" * 64, [], {"note": "x" * provenance.MAX_ENVELOPE_BYTES})
    signed = provenance.envelope(provenance.IN_TOTO_PAYLOAD, statement, [REGISTRY_KEY.signer()])

    with pytest.raises(provenance.Unverified, match="^the envelope is missing, or larger than 512 KiB$"):
        trusted.verify(signed)


def test_a_set_over_the_bound_is_refused_before_its_signature_is_checked():
    trusted = provenance.TrustBundle.parse(bundle(REGISTRY_KEY))
    oversized = {"payloadType": provenance.ACTIVE_SET_PAYLOAD, "payload": "A" * provenance.MAX_ACTIVE_SET_BYTES,
                 "signatures": [{"keyid": REGISTRY_KEY.key_id, "sig": ""}]}

    with pytest.raises(provenance.Unverified, match="^the envelope is missing, or larger than 16384 KiB$"):
        trusted.verify_active_set(oversized)


@pytest.fixture
def environment_key(monkeypatch) -> Iterator[None]:
    """The registry's settings read in this process, with a signing key from the environment."""
    key = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    monkeypatch.delenv("LORAPLANE_ATTESTATION_KEY_DIR", raising=False)  # the suite's registries' folder
    monkeypatch.setenv("LORAPLANE_ATTESTATION_PRIVATE_KEY", key.decode())
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_a_change_that_would_sign_a_set_nodes_refuse_is_refused_and_the_set_kept(environment_key):
    pool = Pool(id=3, name="huge", generation=9)
    signed = signed_set.SignedSet(pool="huge", pool_id=3, generation=9)
    signed_set.sign(pool, signed)
    kept = pool.signed_active_set
    # About 270 bytes a version: this many sign just over the bound.
    count = provenance.MAX_ACTIVE_SET_BYTES // 270 + 1000
    for i in range(count):
        signed.aliases[(i, "production")] = signed_set.SignedAlias(
            i, "production", i, f"acme/adapter-{i:06d}@1", f"{i:064x}", None, i)

    with pytest.raises(Conflict) as refused:
        signed_set.sign(pool, signed)

    assert refused.value.code == "active_set_too_large"
    assert str(refused.value) == (f"pool 'huge' would hold {count} versions, a signed active set larger "
                                  "than 16 MiB, which nodes refuse")
    assert pool.signed_active_set is kept
