"""The pipeline's steps, driven as the tests and the benchmarks drive them: upload a kit adapter
folder, create a suite, record an evaluation's outcome, request and approve a promotion. Uploads,
suites and promotions go through the public API; an outcome is recorded through the same
claim-and-record path a worker uses, for runs that need a promotable version but no engine."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
from sqlalchemy import Engine

from registry.evaluations import claims
from registry.requalification import service as requalification
from devkit.units_of_work import unit_of_work

PEFT_FILES = ("adapter_config.json", "adapter_model.safetensors")


def upload_dir(client: httpx.Client, adapter: str, folder: Path) -> dict:
    parts = [("file", (name, (folder / name).read_bytes())) for name in PEFT_FILES]
    response = client.post(f"/v1/adapters/{adapter}/versions", files=parts)
    assert response.status_code in (200, 201), response.text
    return response.json()


def create_suite(admin: httpx.Client, name: str, base: str, rows: list[dict], metrics: dict,
                 **generation) -> dict:
    body = {"name": name, "base_model": base, "examples": rows, "metrics": metrics,
            "generation": {"max_tokens": 16, **generation}}
    response = admin.post("/v1/eval-suites", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def finish_evaluation(engine: Engine, evaluation_id: int, *, passed: bool = True,
                      parity: bool = True, failing: tuple[str, ...] = (),
                      exact_match: float | None = None, engine_record: dict | None = None) -> None:
    """Record an outcome as a worker would (`exact_match`: the score to report, else 1 or 0;
    `engine_record`: the engine it says it ran on)."""
    score = exact_match if exact_match is not None else 1.0 if passed else 0.0
    metrics = {"exact_match": {"value": score, "base": 0.0,
                               "threshold": {"min": 0.5}, "passed": passed},
               "parity": {"value": 0.0 if parity else 0.5, "threshold": {"max_logprob_diff": 0.01},
                          "passed": parity, "detail": "" if parity else "max logprob diff 0.5"}}
    failing_metrics = list(failing) or ([] if passed and parity else
                                        [m for m, ok in (("exact_match", passed), ("parity", parity)) if not ok])
    with unit_of_work(engine) as session:
        claim = claims.claim_batch(session, evaluation_id, max_versions=1, lease_s=60)
        assert claim.kind == "claimed", claim
        token = claim.token
        if token is None:  # a claim comes with its token
            raise RuntimeError(f"the claim of evaluation {evaluation_id} holds no token")
        others = [e.id for e in claim.evaluations if e.id != evaluation_id]
        if others:
            claims.release(session, token, others, reason="not this test's evaluation")
        (claimed,) = [e for e in claim.evaluations if e.id == evaluation_id]
        outcome = claims.Outcome(passed=not failing_metrics,
                                 reason=None if not failing_metrics else "thresholds",
                                 failing_metrics=failing_metrics, metrics=metrics, engine=engine_record, timings=None,
                                 examples=[], digest=claimed.digest)
        assert claims.record(session, token, evaluation_id, outcome,
                             after_outcome=requalification.after_evaluation)


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


def promoter(admin: httpx.Client, uploader: httpx.Client, engine: Engine, pool: str,
             suite: str) -> Callable[..., dict]:
    """Upload a folder as acme/<name>, record a passed evaluation of `suite`, promote, approve."""

    def run(name: str, folder: Path, alias: str = "production", weight: int | None = None,
            client: httpx.Client | None = None) -> dict:
        version = upload_dir(client or uploader, name if "/" in name else f"acme/{name}", folder)
        if not evaluations_of(admin, version):
            path = f"/v1/adapters/{version['tenant']}/{version['adapter']}/versions/{version['number']}/evaluations"
            assert admin.post(path, json={"suite": suite}).status_code in (200, 202)
            for evaluation in evaluations_of(admin, version):
                finish_evaluation(engine, evaluation["id"])
        created = request_promotion(client or uploader, pool, version, alias, weight=weight)
        assert created.status_code == 201, created.text
        approved = admin.post(f"/v1/promotions/{created.json()['id']}/approve", json={"comment": "ok"})
        assert approved.status_code == 200, approved.text
        return version

    return run
