"""An active-set entry is loaded only when its attestation proves it: signed by a key the node
trusts now, about exactly this served name, digest and files, for this node's pool. Anything
else is refused with its reason in the report, nothing of it is downloaded or loaded, and the
rest of the node stays as it was. The registry never sends such entries (it signs what it
serves), so these are crafted, in the stand-in registry's format (stand_ins.py)."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

import pytest

from tests.serving.agent.node_disk import SMALL
from tests.serving.agent.passes import Node, accepted_by_the_registry
from tests.serving.agent.signing import REGISTRY_KEY, Key, attest, bundle
from tests.serving.agent.stand_ins import POOL, entry

pytestmark = pytest.mark.fast

FOREIGN = Key()
RETIRED = Key()
REFUSED = "refused, not proven: "


def crafted(store, how: str) -> tuple[dict, str]:
    """An entry whose attestation fails in one way, and the reason the node must give."""
    raw = entry(store, "crafted", {**SMALL, "adapter_config.json": b'{"r": 4}'}, key=None)
    other = entry(store, "other", SMALL)
    if how == "missing":
        return raw, REFUSED + "the registry sent no attestation for it"
    if how == "malformed":  # what plain Python would crash on: refused like any other, alone
        return ({**raw, "attestation": {**attest(raw, pool=POOL), "signatures": [{"keyid": ["x"], "sig": "AA=="}]}},
                REFUSED + "the document is malformed (TypeError)")
    if how == "unknown key":
        return ({**raw, "attestation": attest(raw, pool=POOL, key=FOREIGN)},
                REFUSED + f"signed by {FOREIGN.key_id[:16]}…, which the trust bundle does not hold")
    if how == "retired key":
        return ({**raw, "attestation": attest(raw, pool=POOL, key=RETIRED)},
                REFUSED + f"signed by key {RETIRED.key_id[:16]}…, whose trust ended at {RETIRED_AT.isoformat()}")
    if how == "digest swapped":  # the database now names other bytes than were approved
        return ({**raw, "attestation": attest(raw, pool=POOL, digest=other["digest"])},
                REFUSED + f"the attestation approves digest {other['digest'][:12]}…, not {raw['digest'][:12]}…")
    if how == "file swapped":
        files = [{"name": f["name"], "sha256": "0" * 64 if f["name"] == "adapter_model.safetensors"
                  else f["sha256"]} for f in raw["files"]]
        return ({**raw, "attestation": attest(raw, pool=POOL, files=files)},
                REFUSED + "the attestation's files differ from the version's (acme/crafted@1/adapter_model.safetensors)")
    if how == "another version":
        return ({**raw, "attestation": other["attestation"]},
                REFUSED + "the attestation is about acme/other@1, not acme/crafted@1")
    if how == "another pool":
        return ({**raw, "attestation": attest(raw, pool="batch")},
                REFUSED + "the attestation approves it for pool 'batch', not 'chat'")
    if how == "signature of other bytes":  # a real signature, moved onto another statement
        forged = {**attest(raw, pool=POOL), "signatures": other["attestation"]["signatures"]}
        return ({**raw, "attestation": forged},
                REFUSED + f"the signature of key {REGISTRY_KEY.key_id[:16]}… does not verify: the "
                "statement was changed after it was signed")
    raise AssertionError(how)


RETIRED_AT = datetime.now(UTC) - timedelta(minutes=1)
TRUSTED = bundle(REGISTRY_KEY, RETIRED, not_after={RETIRED.key_id: RETIRED_AT})


@pytest.mark.parametrize("how", ["missing", "malformed", "unknown key", "retired key", "digest swapped", "file swapped",
                                 "another version", "another pool", "signature of other bytes"])
def test_an_entry_its_attestation_does_not_prove_is_refused_and_the_rest_loads(store, vllm, tmp_path, how):
    bad, reason = crafted(store, how)
    good = entry(store, "good", SMALL)
    node = Node(tmp_path / "cache", vllm, trusted=TRUSTED)
    requests_before = store.requests

    status = node.run_pass([bad, good])

    assert status["failures"] == [{"served_name": "acme/crafted@1", "reason": reason}]
    assert [name for name, _ in vllm.loads] == ["acme/good@1"]
    assert store.requests - requests_before == len(good["files"])  # nothing of it was downloaded
    assert os.listdir(tmp_path / "cache") == [good["digest"]]
    assert accepted_by_the_registry(status).loaded[0].served_name == "acme/good@1"


def test_a_loaded_version_whose_new_attestation_fails_stays_as_it_was(store, vllm, tmp_path):
    """Never half-applied: a set that stops proving a version does not take it down either (the
    bytes loaded were proven), and is reported; the registry sees the drift."""
    kept, other = entry(store, "kept", SMALL), entry(store, "other", {**SMALL, "extra.json": b"{}"})
    node = Node(tmp_path / "cache", vllm)
    node.run_pass([kept, other])
    loads = list(vllm.loads)

    swapped = {**kept, "attestation": attest(kept, pool=POOL, key=FOREIGN)}
    status = node.run_pass([swapped, other], generation=8)

    assert vllm.loads == loads  # nothing loaded again, nothing unloaded
    assert sorted(vllm.adapters) == ["acme/kept@1", "acme/other@1"]
    assert status["loaded"] == [{"served_name": "acme/kept@1", "digest": kept["digest"]},
                                {"served_name": "acme/other@1", "digest": other["digest"]}]
    assert status["failures"] == [{"served_name": "acme/kept@1", "reason": REFUSED + (
        f"signed by {FOREIGN.key_id[:16]}…, which the trust bundle does not hold")}]
    accepted_by_the_registry(status)

    status = node.run_pass([other], generation=9)  # the set drops it: now it goes

    assert sorted(vllm.adapters) == ["acme/other@1"] and status["failures"] == []

