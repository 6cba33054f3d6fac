"""Two lanes for two cores. `./dev test` runs the suite with two workers (`pytest -n 2 --dist
loadgroup`): one lane runs every module that needs the task kit, in order, and the other runs the
rest, module by module.

The kit's modules wait on vLLM much of the time and keep about one core busy; the registry's keep
the other. One lane holds all of the kit's modules, so the kit is trained and each engine started
once per run, as without workers, and a module's fixtures are set up once in either lane.

Without workers, the modules that need no kit run first, while the head start trains the kit on
the idle core (tests/support/head_start.py).
"""

from __future__ import annotations

import os

import pytest

from tests.support.head_start import needs_kit

KIT_LANE = "kit"


def worker() -> str | None:
    """This process's worker name (gw0, gw1, ...) in a run with workers, else None."""
    return os.environ.get("PYTEST_XDIST_WORKER")


def arrange(items: list[pytest.Item]) -> None:
    """Order the items, and with workers give each its lane: the kit's, or its module's own."""
    kit_modules = {item.module for item in items if needs_kit(item)}
    if worker() is None:
        # stable: collection order within
        items.sort(key=lambda item: (item.module in kit_modules, _leaves_required_suites(item)))
        return
    for item in items:
        lane = KIT_LANE if item.module in kit_modules else item.module.__name__
        item.add_marker(pytest.mark.xdist_group(lane))
    # The kit's lane first: it is the longer one, and loadgroup (--no-loadscope-reorder) hands
    # out lanes in this order. Within it, the dashboard's modules go last: they leave a pool that
    # requires a full suite on the kit's base, and every later upload to that base would be
    # evaluated against it too. Of the other modules, those with an engine of their own go
    # first, while the kit's lane trains the kit: the kit lane's speed measurements wait for
    # every such engine to stop (tests/support/cpu_lock.py), and a late one held them 90 s.
    items.sort(key=lambda item: (item.module not in kit_modules, item.get_closest_marker("own_engine") is None,
                                 _leaves_required_suites(item)))


def _leaves_required_suites(item: pytest.Item) -> bool:
    return item.nodeid.startswith("tests/web/")


def lane_fixtures(items: list[pytest.Item]) -> set[str]:
    """Every fixture the kit's tests use: what a head start may make for them."""
    return set().union(*(item.fixturenames for item in items if needs_kit(item)))


def check_lanes_held(items: list[pytest.Item]) -> None:
    """pytest-xdist names an item's lane in its id (`...::test@kit`); where a pytest keeps ids
    elsewhere, the lanes would silently split and the kit's engines start once per worker."""
    lost = [item.nodeid for item in items if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
    if lost:
        raise pytest.UsageError(f"pytest-xdist did not name the lanes of {len(lost)} tests (e.g. {lost[0]}): "
                                "install the pytest this project pins (pip install -e '.[test]'), or run "
                                "without workers (-n 0)")
