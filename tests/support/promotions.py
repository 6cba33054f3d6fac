"""Finish evaluations and drive promotions for tests that need a promotable version but not a
real engine: outcomes are recorded through the same claim-and-record path a worker uses."""

from __future__ import annotations

import httpx
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from registry.evaluations import claims


def finish_evaluation(engine: Engine, evaluation_id: int, *, passed: bool = True,
                      parity: bool = True, failing: tuple[str, ...] = ()) -> None:
    metrics = {"exact_match": {"value": 1.0 if passed else 0.0, "base": 0.0,
                               "threshold": {"min": 0.5}, "passed": passed},
               "parity": {"value": 0.0 if parity else 0.5, "threshold": {"max_logprob_diff": 0.01},
                          "passed": parity, "detail": "" if parity else "max logprob diff 0.5"}}
    failing = list(failing) or ([] if passed and parity else
                                [m for m, ok in (("exact_match", passed), ("parity", parity)) if not ok])
    with Session(engine) as session, session.begin():
        claim = claims.claim_batch(session, evaluation_id, max_versions=1, lease_s=60)
        assert claim.kind == "claimed", claim
        others = [e.id for e in claim.evaluations if e.id != evaluation_id]
        if others:
            claims.release(session, claim.token, others, reason="not this test's evaluation")
        outcome = claims.Outcome(passed=not failing, reason=None if not failing else "thresholds",
                                 failing_metrics=failing, metrics=metrics, engine=None, timings=None,
                                 examples=[])
        assert claims.record(session, claim.token, evaluation_id, outcome)


def evaluations_of(client: httpx.Client, version: dict) -> list[dict]:
    path = f"/v1/adapters/{version['tenant']}/{version['adapter']}/versions/{version['number']}/evaluations"
    response = client.get(path)
    assert response.status_code == 200, response.text
    return response.json()["items"]


def request_promotion(client: httpx.Client, pool: str, version: dict, alias: str = "production",
                      weight: int | None = None) -> httpx.Response:
    body = {"adapter": f"{version['tenant']}/{version['adapter']}", "version": version["number"],
            "alias": alias}
    if weight is not None:
        body["weight"] = weight
    return client.post(f"/v1/pools/{pool}/promotions", json=body)


def active_set(client: httpx.Client, pool: str) -> dict:
    response = client.get(f"/v1/pools/{pool}/active-set")
    assert response.status_code == 200, response.text
    return response.json()


def served(active: dict) -> dict[str, list[tuple[str, int]]]:
    """served name -> [(alias, weight)] of an active set, for compact assertions."""
    return {e["served_name"]: [(a["alias"], a["weight"]) for a in e["aliases"]] for e in active["entries"]}
