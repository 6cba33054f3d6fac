"""Read what promotions did: a pool's active set, and a compact view of it for assertions
(requesting and approving promotions is devkit.pipeline_steps)."""

from __future__ import annotations

import httpx


def active_set(client: httpx.Client, pool: str) -> dict:
    response = client.get(f"/v1/pools/{pool}/active-set")
    assert response.status_code == 200, response.text
    return response.json()


def served(active: dict) -> dict[str, list[tuple[str, int]]]:
    """served name -> [(alias, weight)] of an active set, for compact assertions."""
    return {e["served_name"]: [(a["alias"], a["weight"]) for a in e["aliases"]] for e in active["entries"]}
