"""The placement rules on their own: capacity, replicas from traffic, stability, gradual moves."""

from __future__ import annotations

import random

import pytest

from registry.placement.rules import EVERYWHERE, SPREAD, moved, place, with_draining

pytestmark = pytest.mark.fast


def zipf_traffic(names: list[str], seed: int = 1, exponent: float = 1.1) -> dict[str, float]:
    weights = [1 / (rank + 1) ** exponent for rank in range(len(names))]
    random.Random(seed).shuffle(weights)
    return dict(zip(names, weights))


def adapters(count: int) -> list[str]:
    return [f"acme/a{i}@1" for i in range(count)]


def nodes(count: int, capacity: int, start: int = 0) -> dict[str, int]:
    return {f"node-{i}": capacity for i in range(start, start + count)}


def test_a_set_that_fits_on_every_node_goes_everywhere():
    placement = place(adapters(3), nodes(2, 4), {})
    assert placement.mode == EVERYWHERE
    assert placement.targets == {"node-0": frozenset(adapters(3)), "node-1": frozenset(adapters(3))}


def test_a_version_on_its_way_out_does_not_spread_a_set_that_otherwise_fits():
    names = adapters(5)  # four that stay, one replaced a moment ago and still draining traffic
    placement = place(names, nodes(2, 4), {}, retiring=[names[0]])
    assert placement.mode == EVERYWHERE and placement.targets["node-0"] == frozenset(names)
    assert place(names, nodes(2, 4), {}).mode == SPREAD  # five that all stay do not fit


@pytest.mark.parametrize("count,capacity,names", [(2, 2, 3), (4, 8, 24), (10, 32, 300), (16, 64, 600)])
def test_every_adapter_is_placed_and_no_node_exceeds_its_capacity(count, capacity, names):
    placement = place(adapters(names), nodes(count, capacity), zipf_traffic(adapters(names)))
    assert placement.mode == SPREAD and placement.unplaced == ()
    assert all(len(held) <= capacity for held in placement.targets.values())
    assert all(placement.nodes_of(name) for name in adapters(names))


def test_busy_adapters_get_replicas_by_their_share_of_traffic():
    names = adapters(12)
    traffic = {name: 1.0 for name in names} | {names[0]: 30.0}  # 30/41 of all requests
    placement = place(names, nodes(4, 6), traffic)
    assert len(placement.nodes_of(names[0])) == 3  # ⌈0.73 × 4⌉
    assert all(len(placement.nodes_of(name)) == 1 for name in names[1:])


def test_when_slots_are_short_extra_replicas_give_way_and_the_least_used_wait():
    names = adapters(5)
    traffic = {name: float(rank + 1) for rank, name in enumerate(names)} | {names[0]: 100.0}
    tight = place(names, nodes(3, 2), traffic)  # a0 wants all 3 nodes; 6 slots leave it 2
    assert tight.unplaced == () and 1 <= len(tight.nodes_of(names[0])) <= 2
    tighter = place(names, nodes(2, 2), traffic)
    assert tighter.unplaced == (names[1],)  # the least used of the five
    assert all(len(held) <= 2 for held in tighter.targets.values())


def test_the_same_inputs_give_the_same_placement():
    names, fleet = adapters(50), nodes(5, 16)
    assert place(names, fleet, zipf_traffic(names)) == place(list(reversed(names)), dict(reversed(fleet.items())),
                                                             zipf_traffic(names))


@pytest.mark.parametrize("count", [4, 8, 16])
def test_a_node_joining_moves_about_one_nth_of_the_adapters(count):
    names, capacity = adapters(800), 1000 // count  # a quarter of the slots spare
    before = place(names, nodes(count, capacity), zipf_traffic(names))
    after = place(names, nodes(count + 1, capacity), zipf_traffic(names), before)
    fraction = len(moved(before, after)) / len(names)
    assert fraction * (count + 1) <= 1.2, fraction
    # Nearly all of it onto the new node; the rest are extra replicas of busy adapters (N+1
    # nodes give them one more) and the odd adapter whose favourite node now has room again.
    elsewhere = moved(before, after) - after.targets[f"node-{count}"]
    assert len(elsewhere) <= 0.1 * len(moved(before, after))


@pytest.mark.parametrize("count", [4, 8, 16])
def test_a_node_leaving_moves_only_what_it_held(count):
    names, capacity = adapters(800), 1000 // (count - 1)
    before = place(names, nodes(count, capacity), zipf_traffic(names))
    remaining = {node: room for node, room in nodes(count, capacity).items() if node != "node-1"}
    after = place(names, remaining, zipf_traffic(names), before)
    assert moved(before, after) <= set(before.targets["node-1"])
    assert len(moved(before, after)) / len(names) * count <= 1.2


def test_a_moved_adapter_stays_on_its_old_node_until_its_new_nodes_load_it():
    names = adapters(6)
    before = place(names, nodes(2, 4), {})
    after = place(names, nodes(3, 4), {}, before)
    leaving = {name: node for node, held in before.targets.items() for name in held - after.targets[node]}
    assert leaving, "the third node should take some adapters"
    nobody_loaded = with_draining(after, before, nodes(3, 4), loaded={})
    for name, node in leaving.items():
        assert name in nobody_loaded.served_by(node)
        assert len(nobody_loaded.served_by(node)) <= 4
    loaded = {"node-2": frozenset(after.targets["node-2"])}
    done = with_draining(after, before, nodes(3, 4), loaded)
    assert all(name not in done.served_by(node) for name, node in leaving.items())


def test_draining_never_takes_a_node_past_its_capacity():
    names = adapters(8)
    before = place(names, nodes(2, 4), {})
    # The same two nodes with half the room: targets take it all, nothing is kept to drain.
    after = place(names, {**nodes(2, 2), **nodes(2, 2, start=2)}, {}, before)
    drained = with_draining(after, before, {**nodes(2, 2), **nodes(2, 2, start=2)}, loaded={})
    assert all(len(drained.served_by(node)) <= 2 for node in drained.targets)
