"""The whole agent, in this process, against a stand-in registry and vLLM: whatever one version
or the node's disk does, the agent goes on following the registry and reports what it holds; it
keeps its trust bundle current through a rotation and trusts nothing before it has one."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from registry.nodes.schemas import NodeReport
from serving.agent.main import Agent
from serving.agent.settings import AgentSettings
from tests.serving.agent.node_disk import LARGE, SMALL, largest_file
from tests.serving.agent.signing import REGISTRY_KEY, Key, bundle, sign_set
from tests.serving.agent.stand_ins import POOL, VLLM_VERSION, StandInRegistry, StandInVllm, entry


def run_agent(registry: StandInRegistry, vllm: StandInVllm, state_dir: Path,
              until: Callable[[], object], timeout_s: float = 15, **settings_: object) -> None:
    settings = AgentSettings(pool=POOL, registry_url=registry.url, vllm_url=vllm.url,
                             node_token="node-token", node_id="node-1", state_dir=state_dir,
                             metrics_port=0, resync_s=0.2, heartbeat_s=1, poll_wait_s=1,
                             request_timeout_s=5, backoff_max_s=1, **settings_)

    async def run() -> None:
        stop = asyncio.Event()
        running = asyncio.create_task(Agent(settings).run(stop))
        deadline = time.monotonic() + timeout_s
        while not until() and time.monotonic() < deadline and not running.done():
            await asyncio.sleep(0.05)  # the poll interval; the agent runs meanwhile
        stop.set()
        await running

    asyncio.run(run())


def last_report(registry: StandInRegistry) -> dict | None:
    return registry.reports[-1] if registry.reports else None


def test_a_version_the_disk_cannot_take_is_reported_and_the_rest_is_served(store, vllm, tmp_path):
    large, small = entry(store, "large", LARGE), entry(store, "small", SMALL)
    registry = StandInRegistry(POOL, [large, small])
    try:
        with largest_file():
            run_agent(registry, vllm, tmp_path / "state", until=lambda: registry.reports)
    finally:
        registry.close()

    report = NodeReport.model_validate(last_report(registry))  # as the registry reads it
    assert report.generation == 1
    assert [(a.served_name, a.digest) for a in report.loaded] == [("acme/small@1", small["digest"])]
    assert [(f.served_name, f.reason) for f in report.failures] == [
        ("acme/large@1", "the node's cache could not store acme/large@1: File too large")]
    assert list(vllm.adapters) == ["acme/small@1"]


def test_a_last_known_good_copy_the_disk_cannot_take_does_not_stop_the_node(store, vllm, tmp_path):
    small = entry(store, "small", SMALL)
    registry = StandInRegistry(POOL, [small])
    # A folder where the agent writes its copy before renaming it into place.
    (tmp_path / "state" / f"active-set.{os.getpid()}.tmp").mkdir(parents=True)
    try:
        run_agent(registry, vllm, tmp_path / "state", until=lambda: registry.reports)
    finally:
        registry.close()

    report = NodeReport.model_validate(last_report(registry))
    assert [a.served_name for a in report.loaded] == ["acme/small@1"] and report.failures == []
    assert not (tmp_path / "state" / "active-set.json").exists()


def test_the_report_says_which_engine_serves(store, vllm, tmp_path):
    registry = StandInRegistry(POOL, [entry(store, "small", SMALL)])
    try:
        run_agent(registry, vllm, tmp_path / "state", until=lambda: registry.reports, engine_dtype="float32")
    finally:
        registry.close()

    report = NodeReport.model_validate(last_report(registry))
    assert report.engine.model_dump() == {"vllm_version": VLLM_VERSION, "dtype": "float32", "flags": {
        "max_model_len": 512, "max_loras": 2, "max_cpu_loras": 8, "max_lora_rank": 16}}


def test_a_rotated_key_is_learnt_from_the_registry_when_an_entry_names_it(store, vllm, tmp_path):
    new = Key()
    first = entry(store, "first", SMALL)
    registry = StandInRegistry(POOL, [first])
    try:
        run_agent(registry, vllm, tmp_path / "state", until=lambda: "acme/first@1" in vllm.adapters)
        assert registry.bundle_requests == 1  # pinned at the first start

        registry.bundle = bundle(REGISTRY_KEY, new, version=2)  # the registry rotates to `new`
        rotated = entry(store, "rotated", {**SMALL, "x.json": b"{}"}, key=new)
        registry.active = {**registry.active, "generation": 2, "entries": [first, rotated]}
        run_agent(registry, vllm, tmp_path / "state", until=lambda: "acme/rotated@1" in vllm.adapters)
    finally:
        registry.close()

    assert sorted(vllm.adapters) == ["acme/first@1", "acme/rotated@1"]
    assert json.loads((tmp_path / "state" / "trust-bundle.json").read_text()) == registry.bundle


def test_an_entry_signed_by_a_key_nobody_publishes_is_refused_and_the_bundle_asked_for_sparingly(
        store, vllm, tmp_path):
    forged = entry(store, "forged", SMALL, key=Key())
    good = entry(store, "good", {**SMALL, "x.json": b"{}"})
    registry = StandInRegistry(POOL, [forged, good])
    try:
        run_agent(registry, vllm, tmp_path / "state", timeout_s=3, until=lambda: False)
    finally:
        registry.close()

    assert list(vllm.adapters) == ["acme/good@1"]
    report = NodeReport.model_validate(last_report(registry))
    assert [(f.served_name, f.reason) for f in report.failures] == [("acme/forged@1", (
        f"refused, not proven: signed by {forged['attestation']['signatures'][0]['keyid'][:16]}…, "
        "which the trust bundle does not hold"))]
    assert registry.bundle_requests == 2  # at start, then once for the key it lacks: not every pass


def test_nothing_is_loaded_before_the_node_holds_a_trust_bundle(store, vllm, tmp_path):
    good = entry(store, "good", SMALL)
    registry = StandInRegistry(POOL, [good])
    registry.bundle = {"not": "a bundle"}  # a first start while the registry publishes none
    try:
        run_agent(registry, vllm, tmp_path / "state", timeout_s=2, until=lambda: False)
        assert vllm.loads == [] and store.requests == 0
        assert last_report(registry)["failures"] == [{"served_name": "acme/good@1", "reason": (
            "refused, not proven: the node holds no trust bundle yet (refused the registry's trust "
            "bundle: the envelope holds 'None', not 'application/vnd.loraplane.trust-bundle+json')")}]

        registry.bundle = bundle(REGISTRY_KEY)
        run_agent(registry, vllm, tmp_path / "state", until=lambda: vllm.adapters)
    finally:
        registry.close()

    assert list(vllm.adapters) == ["acme/good@1"]


def test_with_verification_off_the_agent_warns_and_loads_unattested_entries(store, vllm, tmp_path, caplog):
    unsigned = entry(store, "unsigned", SMALL, key=None)
    registry = StandInRegistry(POOL, [unsigned])
    try:
        with caplog.at_level(logging.WARNING, logger="loraplane.agent"):
            run_agent(registry, vllm, tmp_path / "state", until=lambda: vllm.adapters,
                      verify_provenance=False)
    finally:
        registry.close()

    assert list(vllm.adapters) == ["acme/unsigned@1"]
    assert registry.bundle_requests == 0
    assert any("LORAPLANE_AGENT_VERIFY_PROVENANCE is off" in r.message for r in caplog.records)


def refusals(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "the active set is refused" in r.getMessage()]


def test_a_set_whose_signature_does_not_verify_is_not_taken_and_the_node_keeps_what_it_holds(
        store, vllm, tmp_path, caplog):
    held, smuggled = entry(store, "held", SMALL), entry(store, "smuggled", {**SMALL, "x.json": b"{}"})
    registry = StandInRegistry(POOL, [held])
    try:
        run_agent(registry, vllm, tmp_path / "state", until=lambda: "acme/held@1" in vllm.adapters)
        fetched = store.requests
        registry.active = {**registry.active, "generation": 2, "entries": [held, smuggled],
                           "signed": sign_set(POOL, [held, smuggled], 2, key=Key())}
        with caplog.at_level(logging.ERROR):
            run_agent(registry, vllm, tmp_path / "state", timeout_s=2.5, until=lambda: False)
    finally:
        registry.close()

    assert list(vllm.adapters) == ["acme/held@1"] and store.requests == fetched
    assert refusals(caplog) and all("its signed set does not verify: signed by" in m for m in refusals(caplog))
    assert last_report(registry)["generation"] == 1


def test_an_older_signed_set_is_refused_even_by_a_node_restarted_since(store, vllm, tmp_path, caplog):
    current, rolled_back = entry(store, "current", SMALL), entry(store, "rolled-back", {**SMALL, "x.json": b"{}"})
    registry = StandInRegistry(POOL, [current], generation=7)
    try:
        run_agent(registry, vllm, tmp_path / "state", until=lambda: "acme/current@1" in vllm.adapters)
        # A set the registry really signed at generation 5 is put back, under a newer generation;
        # the agent that took generation 7 is a new process (its last-known-good set remembers).
        registry.active = {**registry.active, "generation": 8, "entries": [rolled_back],
                           "signed": sign_set(POOL, [rolled_back], 5)}
        with caplog.at_level(logging.ERROR):
            run_agent(registry, vllm, tmp_path / "state", timeout_s=2.5, until=lambda: False)
    finally:
        registry.close()

    assert list(vllm.adapters) == ["acme/current@1"]
    assert any("its signed set is generation 5, older than generation 7 this node already took" in m
               for m in refusals(caplog))


def test_an_entry_the_signed_set_does_not_name_is_refused_on_its_own(store, vllm, tmp_path):
    named, unnamed = entry(store, "named", SMALL), entry(store, "unnamed", {**SMALL, "x.json": b"{}"})
    registry = StandInRegistry(POOL, [named, unnamed])
    registry.active["signed"] = sign_set(POOL, [named], 1)
    try:
        run_agent(registry, vllm, tmp_path / "state", until=lambda: registry.reports and vllm.adapters)
    finally:
        registry.close()

    assert list(vllm.adapters) == ["acme/named@1"]
    assert last_report(registry)["failures"] == [{"served_name": "acme/unnamed@1", "reason": (
        "refused, not proven: the pool's signed active set does not name it with this digest")}]
