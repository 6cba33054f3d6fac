"""Promote through the API, and read what promotions did: a pool's active set, and a compact view
of it for assertions (requesting a promotion is devkit.pipeline_steps)."""

from __future__ import annotations

import httpx

from devkit.pipeline_steps import request_promotion


def promote(requester: httpx.Client, approver: httpx.Client, pool: str, version: dict,
            alias: str = "production", weight: int | None = None) -> dict:
    """Request the promotion as `requester`, approve it as `approver`; the approved promotion."""
    created = request_promotion(requester, pool, version, alias, weight)
    assert created.status_code == 201, created.text
    approved = approver.post(f"/v1/promotions/{created.json()['id']}/approve", json={"comment": "ok"})
    assert approved.status_code == 200, approved.text
    return approved.json()


def active_set(client: httpx.Client, pool: str) -> dict:
    response = client.get(f"/v1/pools/{pool}/active-set")
    assert response.status_code == 200, response.text
    return response.json()


def served(active: dict) -> dict[str, list[tuple[str, int]]]:
    """served name -> [(alias, weight)] of an active set, for compact assertions."""
    return {e["served_name"]: [(a["alias"], a["weight"]) for a in e["aliases"]] for e in active["entries"]}
