"""The architecture holds: dependencies point one way, and no module imports itself round a loop.

The contracts live in pyproject.toml ([tool.importlinter]); each runs here as its own test, so a
failure names the contract and lists the imports that break it. The cycle check reads the same
graph (grimp's, which counts imports inside functions too) and prints the loop it found."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
CONTRACTS = [contract["id"] for contract in CONFIG["contracts"]]
ROOT_PACKAGES = CONFIG["root_packages"]


@pytest.mark.parametrize("contract", CONTRACTS)
def test_import_contract_is_kept(contract):
    linter = Path(sys.executable).parent / "lint-imports"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([str(linter), "--no-cache", "--no-logo", "--contract", contract],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        pytest.fail(f"contract {contract!r} is broken:\n{result.stdout}{result.stderr}", pytrace=False)


def test_the_module_graph_has_no_import_cycle():
    graph = grimp.build_graph(*ROOT_PACKAGES, cache_dir=None)
    cycles = strongly_connected_sets(graph)
    if cycles:
        report = "\n\n".join(describe(graph, members) for members in cycles)
        pytest.fail(f"import cycles:\n\n{report}", pytrace=False)


def strongly_connected_sets(graph: grimp.ImportGraph) -> list[frozenset[str]]:
    """Every set of modules that import each other round a loop (Tarjan's algorithm, without
    recursion: the graph is deep enough to exhaust Python's stack)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        while work:
            module, imported = work[-1]
            for other in imported:
                if other not in index:
                    index[other] = low[other] = len(index)
                    stack.append(other)
                    on_stack.add(other)
                    work.append((other, iter(sorted(graph.find_modules_directly_imported_by(other)))))
                    break
                if other in on_stack:
                    low[module] = min(low[module], index[other])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    members = {module}
                    while (member := stack.pop()) != module:
                        on_stack.discard(member)
                        members.add(member)
                    on_stack.discard(module)
                    if len(members) > 1 or module in graph.find_modules_directly_imported_by(module):
                        found.append(frozenset(members))
    return found


def describe(graph: grimp.ImportGraph, members: frozenset[str]) -> str:
    """The set, then one loop through it with each import's line."""
    start = min(members)
    loop = _shortest_loop(graph, start, members)
    steps = []
    for importer, imported in zip(loop, loop[1:]):
        details = graph.get_import_details(importer=importer, imported=imported)
        lines = sorted({detail["line_number"] for detail in details})
        steps.append(f"  {importer} imports {imported} (line {', '.join(map(str, lines))})")
    return f"{{{', '.join(sorted(members))}}}\n" + "\n".join(steps)


def _shortest_loop(graph: grimp.ImportGraph, start: str, members: frozenset[str]) -> list[str]:
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for module in frontier:
            for other in sorted(graph.find_modules_directly_imported_by(module) & members):
                if other == start:
                    path = [module]  # walked back from the last step to the start
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if other not in came_from:
                    came_from[other] = module
                    following.append(other)
        frontier = following
    return [start, start]
