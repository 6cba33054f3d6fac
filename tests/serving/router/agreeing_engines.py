"""For tests of what the router does once it has confirmed a node (routing rules, forwarding,
waiting), where no engine runs: each node's engine is taken to list exactly what its agent
reports. Asking real engines is tested against vLLM and an impostor (test_router.py)."""

from __future__ import annotations

from typing import Any

from serving.router.fleet import Fleet

DIGEST = "d" * 64


def follow(fleet: Fleet, reports: list[dict[str, Any]]) -> None:
    """`fleet.update(reports)`, then judge every node as its engine would, agreeing."""
    fleet.update(reports)
    for node in fleet.due_for_check():
        for name in node.serving:
            fleet.digests.setdefault(name, DIGEST)
        fleet.judge(node, {name: fleet.digests[name] for name in node.serving})
