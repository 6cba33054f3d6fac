"""The router's decisions on their own: name resolution, node choice, admission by tier.
Plain objects and a real event loop; no servers needed."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import pytest

from serving.router.admission import Admission
from serving.router.catalog import Catalog
from serving.router.errors import RouterError
from serving.router.fleet import Fleet
from tests.serving.router.agreeing_engines import follow
from tests.support.until import until

ENTRIES = [
    {"tenant": "acme", "adapter": "chat", "served_name": "acme/chat@1",
     "aliases": [{"alias": "production", "weight": 80}], "retiring": False},
    {"tenant": "acme", "adapter": "chat", "served_name": "acme/chat@2",
     "aliases": [{"alias": "canary", "weight": 20}], "retiring": False},
    {"tenant": "acme", "adapter": "chat", "served_name": "acme/chat@0", "aliases": [], "retiring": True},
    {"tenant": "globex", "adapter": "chat", "served_name": "globex/chat@3",
     "aliases": [{"alias": "production", "weight": 100}], "retiring": False},
]


def test_names_resolve_to_one_served_version_and_never_across_tenants():
    catalog = Catalog.from_active_set("p", 7, ENTRIES)
    rng = random.Random(1)
    picks = Counter(catalog.resolve("acme/chat", "acme", rng).served_name for _ in range(2000))
    assert set(picks) == {"acme/chat@1", "acme/chat@2"} and 300 < picks["acme/chat@2"] < 500
    assert catalog.resolve("acme/chat:canary", "acme").served_name == "acme/chat@2"
    assert catalog.resolve("acme/chat:production", "acme").served_name == "acme/chat@1"
    assert catalog.resolve("acme/chat@0", "acme").alias == "pinned"  # retiring, still served
    for model, tenant in (("globex/chat", "acme"), ("acme/chat@9", "acme"), ("acme/chat:beta", "acme"),
                          ("acme/chat", "globex"), ("tiny-base", "acme")):
        with pytest.raises(RouterError) as refused:
            catalog.resolve(model, tenant)
        assert refused.value.status == 404
        assert all(n.startswith(tenant + "/") for n in refused.value.extra["available"])


def reports(*nodes: tuple[str, list[str]], capacity: int = 2) -> list[dict]:
    return [{"node_id": node_id, "vllm_url": f"http://{node_id}:8000", "stale": False,
             "limits": {"max_cpu_loras": capacity}, "serving": serving} for node_id, serving in nodes]


def test_an_adapter_sticks_to_the_node_that_holds_it_and_spreads_only_into_free_slots():
    everything = ["a@1", "b@1", "c@1", "d@1"]
    fleet = Fleet(spill_outstanding=4)
    follow(fleet, reports(("n1", everything), ("n2", everything)))
    homes = {}
    for name in everything:
        node = fleet.choose(name)
        node.touch(name)
        homes[name] = node.node_id
    assert Counter(homes.values()) == {"n1": 2, "n2": 2}  # free slots fill first
    assert all(fleet.choose(name).node_id == homes[name] for name in everything for _ in range(5))

    hot = fleet.nodes[homes["a@1"]]
    hot.outstanding = 10  # busy, but the other node has no free slot: no eviction for a spill
    assert fleet.choose("a@1") is hot
    assert fleet.choose("a@1", exclude={hot.node_id}).node_id != hot.node_id  # a retry goes elsewhere


def test_only_nodes_that_report_the_name_and_are_up_get_it():
    fleet = Fleet(spill_outstanding=4)
    follow(fleet, reports(("n1", ["a@1", "b@1"]), ("n2", ["b@1"])))
    assert fleet.choose("a@1").node_id == "n1" and fleet.choose("c@1") is None
    fleet.mark_down(fleet.nodes["n1"], 60)
    assert {fleet.choose("b@1").node_id for _ in range(5)} == {"n2"}  # n1 cools down
    assert fleet.choose("a@1").node_id == "n1"  # but, the only holder, is still tried
    assert fleet.choose("a@1", exclude={"n1"}) is None


def test_a_node_whose_report_is_stale_gets_a_name_only_when_no_fresh_node_has_it():
    fleet = Fleet(spill_outstanding=4)
    follow(fleet, [{**reports(("n1", ["a@1", "b@1"]))[0], "stale": True}, *reports(("n2", ["a@1"]))])
    assert {fleet.choose("a@1").node_id for _ in range(5)} == {"n2"}
    assert fleet.choose("b@1").node_id == "n1"  # its vLLM still holds b@1; a 404 would retry


def active_entries(*names: str, retiring: tuple[str, ...] = ()) -> list[dict]:
    return [{"served_name": name, "digest": "d" * 64, "nodes": [], "retiring": name in retiring}
            for name in (*names, *retiring)]


def test_a_version_no_node_holds_goes_cold_only_where_the_pool_loads_on_demand():
    fleet = Fleet(spill_outstanding=4)
    follow(fleet, reports(("n1", ["a@1"]), ("n2", []), ("n3", [])))
    fleet.follow_active_set(active_entries("a@1", "cold@1", retiring=("old@1",)), on_demand=False)
    assert fleet.choose("cold@1") is None and fleet.choose_cold("cold@1") is None  # refuse: never cold

    fleet.follow_active_set(active_entries("a@1", "cold@1", retiring=("old@1",)), on_demand=True)
    assert fleet.choose("cold@1") is None  # nobody holds it
    first = fleet.choose_cold("cold@1")
    assert first is not None and first.node_id in {"n1", "n2", "n3"}
    assert fleet.choose_cold("old@1") is None  # a retiring version is never loaded anew
    assert fleet.choose_cold("not-in-the-set@1") is None
    assert fleet.choose_cold("cold@1", exclude={"n1", "n2", "n3"}) is None


def test_a_cold_version_goes_to_a_live_node_with_room_else_to_its_favourite():
    fleet = Fleet(spill_outstanding=4)
    follow(fleet, [*reports(("n1", []), ("n2", []), capacity=1), {**reports(("n3", []))[0], "stale": True}])
    fleet.follow_active_set(active_entries("x@1", "y@1", "z@1"), on_demand=True)
    fleet.nodes["n2"].touch("other@1")  # n2's one slot is taken
    assert {fleet.choose_cold("x@1").node_id for _ in range(5)} == {"n1"}  # n3's report is stale
    fleet.nodes["n1"].touch("other@2")
    favourites = {name: fleet.choose_cold(name).node_id for name in ("x@1", "y@1", "z@1")}
    assert set(favourites.values()) <= {"n1", "n2"}
    assert all(fleet.choose_cold(name).node_id == node for name, node in favourites.items() for _ in range(5))
    fleet.mark_down(fleet.nodes["n1"], 60)
    assert {fleet.choose_cold(name).node_id for name in ("x@1", "y@1", "z@1")} == {"n2"}


def test_interactive_requests_are_admitted_before_queued_batch_ones():
    async def scenario() -> list[str]:
        admission = Admission(max_inflight=2, batch_max_inflight=1, queue_timeout_s=5)
        order, release = [], asyncio.Event()

        async def request(tier: str, name: str) -> None:
            async with admission.slot(tier):
                order.append(name)
                await release.wait()

        tasks = [asyncio.create_task(request("batch", "b1"))]
        await asyncio.sleep(0)  # one turn of the loop: each request is in line before the next
        tasks += [asyncio.create_task(request("batch", "b2"))]  # over the batch cap: waits
        await asyncio.sleep(0)
        tasks += [asyncio.create_task(request("interactive", "i1"))]  # the free slot is its
        await asyncio.sleep(0)
        tasks += [asyncio.create_task(request("interactive", "i2"))]  # total cap: waits
        await until(lambda: len(admission.waiting["interactive"]) == 1, what="i2 to wait in line")
        assert order == ["b1", "i1"] and admission.inflight == {"interactive": 1, "batch": 1}
        release.set()
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(scenario()) == ["b1", "i1", "i2", "b2"]


def test_a_request_that_waits_too_long_gets_503_and_gives_its_place_back():
    async def scenario() -> None:
        admission = Admission(max_inflight=1, batch_max_inflight=1, queue_timeout_s=0.05)
        async with admission.slot("interactive"):
            with pytest.raises(RouterError) as refused:
                async with admission.slot("batch"):
                    pass
        assert refused.value.status == 503 and refused.value.retry_after_s == 1
        assert admission.inflight == {"interactive": 0, "batch": 0} and not admission.waiting["batch"]

    asyncio.run(scenario())


def test_one_tenant_cannot_fill_the_line_for_the_others():
    async def scenario() -> None:
        admission = Admission(max_inflight=2, batch_max_inflight=1, queue_timeout_s=5, tenant_max_inflight=3)
        release = asyncio.Event()

        async def request(tenant: str) -> None:
            with admission.tenant_share(tenant):
                async with admission.slot("interactive"):
                    await release.wait()

        acme = [asyncio.create_task(request("acme")) for _ in range(3)]  # 2 forwarded, 1 waiting
        await until(lambda: len(admission.waiting["interactive"]) == 1, what="the third to wait")
        with pytest.raises(RouterError) as refused:
            await request("acme")
        globex = asyncio.create_task(request("globex"))  # waits in line, not refused
        await until(lambda: len(admission.waiting["interactive"]) == 2, what="globex to wait in line")
        assert (refused.value.status, refused.value.code, refused.value.retry_after_s) == (429, "tenant_busy", 1)
        assert refused.value.message == "tenant acme already has 3 requests in flight here"
        assert admission.by_tenant == {"acme": 3, "globex": 1} and not globex.done()
        release.set()
        await asyncio.gather(*acme, globex)
        assert not admission.by_tenant and admission.inflight == {"interactive": 0, "batch": 0}

    asyncio.run(scenario())
