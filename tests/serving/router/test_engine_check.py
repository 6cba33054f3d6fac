"""The router believes a node holds a version only when the node's engine itself lists it, loaded
from the folder named by the version's digest; a report claiming more is not enough. Engines here
are impostors (bench/trust_attacks/impostor.py): what they stand for, a server that lists what
it likes, is the point."""

from __future__ import annotations

import asyncio

import aiohttp

from serving.router import metrics
from serving.router.engines import MAX_MODELS_BYTES, EngineCheck
from serving.router.fleet import Fleet
from bench.trust_attacks.impostor import Impostor

GOOD, OTHER = "a" * 64, "b" * 64
NAMES = ["acme/chat@1", "globex/chat@3"]


def fleet_reporting(url: str, node_id: str) -> Fleet:
    fleet = Fleet(spill_outstanding=8)
    fleet.follow_active_set([{"served_name": name, "digest": GOOD} for name in NAMES])
    fleet.update([{"node_id": node_id, "vllm_url": url, "stale": False,
                   "limits": {"max_cpu_loras": 4}, "serving": NAMES}])
    return fleet


def checks(node_id: str, outcome: str) -> float:
    return metrics.REGISTRY.get_sample_value("loraplane_router_engine_checks_total",
                                             {"node": node_id, "outcome": outcome}) or 0.0


async def confirm(fleet: Fleet) -> None:
    async with aiohttp.ClientSession() as http:
        await fleet.confirm(EngineCheck(http, timeout_s=5))


def test_a_reported_name_is_routable_only_once_the_engine_lists_it_from_its_digest():
    listed = {NAMES[0]: f"/var/lib/agent/cache/{GOOD}", NAMES[1]: f"/var/lib/agent/cache/{OTHER}"}
    with Impostor(listed) as engine:
        fleet = fleet_reporting(engine.url, "n-half")
        assert fleet.choose(NAMES[0]) is None  # reported, not yet confirmed

        asyncio.run(confirm(fleet))

        assert fleet.choose(NAMES[0]).node_id == "n-half"
        assert fleet.choose(NAMES[1]) is None  # listed, but from other bytes' folder
        assert checks("n-half", "refuted") == 1
        asyncio.run(confirm(fleet))  # backing off: not asked again at once
        assert checks("n-half", "refuted") == 1


def test_an_engine_that_lists_nothing_or_cannot_be_read_confirms_nothing():
    with Impostor({}) as empty:
        fleet = fleet_reporting(empty.url, "n-empty")
        asyncio.run(confirm(fleet))
        assert all(fleet.choose(name) is None for name in NAMES)
        assert checks("n-empty", "refuted") == 1

    oversized = {f"acme/name-{i}@1": "/" + "x" * 4096 for i in range(MAX_MODELS_BYTES // 4096 + 1)}
    with Impostor(oversized) as flood:
        fleet = fleet_reporting(flood.url, "n-flood")
        asyncio.run(confirm(fleet))
        assert all(fleet.choose(name) is None for name in NAMES)
        assert checks("n-flood", "unreachable") == 1
        assert flood.prompts == []


def test_a_node_whose_engine_loses_a_name_is_asked_again_before_its_next_prompt():
    with Impostor({name: f"/cache/{GOOD}" for name in NAMES}) as engine:
        fleet = fleet_reporting(engine.url, "n-lost")
        asyncio.run(confirm(fleet))
        node = fleet.choose(NAMES[0])
        assert node is not None

        node.lost(NAMES[0])  # the engine answered 404 for it

        assert fleet.choose(NAMES[0]) is None


def test_a_listing_that_arrives_in_many_pieces_is_read_whole():
    """A real network hands the answer over in chunks: every one of them counts."""
    many = {f"acme/filler-{i}@1": f"/cache/{'c' * 64}" for i in range(3000)}
    with Impostor({**many, NAMES[0]: f"/cache/{GOOD}", NAMES[1]: f"/cache/{GOOD}"}) as engine:
        fleet = fleet_reporting(engine.url, "n-chunked")
        asyncio.run(confirm(fleet))
        assert fleet.choose(NAMES[0]).node_id == fleet.choose(NAMES[1]).node_id == "n-chunked"


def test_an_engine_that_cannot_be_asked_keeps_what_it_confirmed_before():
    with Impostor({name: f"/cache/{GOOD}" for name in NAMES}) as engine:
        fleet = fleet_reporting(engine.url, "n-away")
        asyncio.run(confirm(fleet))
    node = fleet.nodes["n-away"]
    node.serving = node.serving | {"acme/new@2"}  # a new name, while the engine is away
    fleet.digests["acme/new@2"] = GOOD

    asyncio.run(confirm(fleet))

    assert checks("n-away", "unreachable") == 1
    assert fleet.choose(NAMES[0]) is node and fleet.choose("acme/new@2") is None
