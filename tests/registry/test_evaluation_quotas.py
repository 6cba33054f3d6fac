"""One tenant cannot take the shared evaluation workers from the others: its waiting evaluations
and its suites are bounded, and a worker claims re-qualification's evaluations first and then
the tenants' in turn, never one tenant's whole backlog before another's first.

A registry of its own, on the session's database, holds the small quotas; the tenants are this
module's own, so that no other test's evaluations count."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from devkit import services
from devkit.pipeline_steps import create_suite, evaluations_of, upload_dir
from registry.evaluations import claims
from registry.tables import AdapterVersion, EvalSuite, Evaluation
from tests.support.asserts import assert_refused
from tests.support.nodes import issue_token
from devkit.units_of_work import unit_of_work

BASE, SUITE, OTHER_SUITE, POOL = "quota-base", "quota-suite", "quota-suite-2", "quota-pool"
WAITING_QUOTA, SUITE_QUOTA = 3, 1
seeds = itertools.count(700)


@pytest.fixture(scope="module")
def quota_registry(service_dir: Path, registry: services.Service) -> services.Service:
    env = {key: value for key, value in registry.env.items() if key.startswith("LORAPLANE_")}
    env.pop("LORAPLANE_PUBLIC_URL", None)
    env.pop("LORAPLANE_DATA_DIR", None)
    env.update(LORAPLANE_TENANT_MAX_WAITING_EVALUATIONS=str(WAITING_QUOTA),
               LORAPLANE_TENANT_MAX_SUITES=str(SUITE_QUOTA))
    server = services.start_registry(service_dir / "registry-quotas", env)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tenants(quota_registry, admin, tiny_base) -> dict[str, httpx.Client]:
    """An uploader of each of two tenants of this module, on the quota registry; a pool on a base
    of their own requires one suite, so that each upload queues one evaluation."""
    config = json.loads((tiny_base / "config.json").read_text())
    assert admin.post("/v1/base-models", json={"name": BASE, "config": config}).status_code == 201
    for name in (SUITE, OTHER_SUITE):
        create_suite(admin, name, BASE, [{"prompt": "1 =>", "reference": "one"}], {"exact_match": {"min": 0.5}})
    pool = {"name": POOL, "base_model": BASE, "dtype": "float32", "required_suites": [SUITE],
            "max_loras": 2, "max_cpu_loras": 8, "max_lora_rank": 16}
    assert admin.post("/v1/pools", json=pool).status_code == 201
    clients = {tenant: httpx.Client(base_url=quota_registry.url, timeout=60, headers={
        "Authorization": "Bearer " + issue_token(admin, f"uploader@{tenant}", role="uploader", tenant=tenant)})
        for tenant in ("quota-a", "quota-b")}
    yield clients
    for client in clients.values():
        client.close()


@pytest.fixture(scope="module")
def adapter_folder(tiny_base, tmp_path_factory):
    from devkit.tiny_model import build_adapter

    root = tmp_path_factory.mktemp("quota-adapters")

    def make() -> Path:
        seed = next(seeds)
        return build_adapter(tiny_base, root / f"a-{seed}", r=8, lora_alpha=16, target_modules=("q_proj", "v_proj"),
                             seed=seed, base_model_name=BASE)
    return make


def versions_stored(engine) -> int:
    with Session(engine) as session:
        return session.scalar(select(func.count()).select_from(AdapterVersion))


@pytest.fixture(scope="module")
def filled(tenants, adapter_folder) -> dict[str, list[dict]]:
    """quota-a fills its quota with three uploads; quota-b uploads one afterwards."""
    uploaded = {"quota-a": [upload_dir(tenants["quota-a"], f"quota-a/bulk-{i}", adapter_folder()) for i in range(3)]}
    uploaded["quota-b"] = [upload_dir(tenants["quota-b"], "quota-b/small", adapter_folder())]
    return uploaded


def test_an_upload_past_the_tenants_waiting_quota_is_refused_and_nothing_is_stored(
        filled, tenants, adapter_folder, engine, admin):
    before = versions_stored(engine)
    folder = adapter_folder()
    parts = [("file", (name, (folder / name).read_bytes()))
             for name in ("adapter_config.json", "adapter_model.safetensors")]

    refused = tenants["quota-a"].post("/v1/adapters/quota-a/bulk-9/versions", files=parts)

    assert_refused(refused, 429, "quota_exceeded",
                   "tenant 'quota-a' has 3 evaluations waiting or running, and may have at most 3 "
                   "(LORAPLANE_TENANT_MAX_WAITING_EVALUATIONS); 1 more would pass it")
    assert refused.headers["Retry-After"] == "60"
    assert versions_stored(engine) == before
    assert admin.get("/v1/adapters/quota-a/bulk-9").status_code == 404

    # A request for another evaluation is refused alike, and the other tenant is not held back.
    version = filled["quota-a"][0]
    again = tenants["quota-a"].post(f"/v1/adapters/quota-a/bulk-0/versions/{version['number']}/evaluations",
                                    json={"suite": OTHER_SUITE})
    assert_refused(again, 429, "quota_exceeded", "tenant 'quota-a' has 3 evaluations waiting or running")
    assert len(evaluations_of(admin, version)) == 1
    assert tenants["quota-b"].post("/v1/adapters/quota-b/small/versions", files=parts).status_code == 201


def test_a_worker_claims_re_qualification_first_then_the_tenants_in_turn(filled, admin, engine):
    ids = {tenant: [evaluations_of(admin, v)[0]["id"] for v in versions] for tenant, versions in filled.items()}
    first_a, *rest_a = ids["quota-a"]
    (first_b,) = ids["quota-b"]
    with unit_of_work(engine) as session:
        claim = claims.claim_batch(session, first_a, max_versions=2, lease_s=60)
        claimed = [e.id for e in claim.evaluations]
        claims.release(session, claim.token, claimed, reason="looked only")
    # Its own evaluation, then quota-b's, older ones of quota-a notwithstanding.
    assert claimed == [first_a, first_b]

    # An evaluation asked for by re-qualification (priority 0: a version that already serves)
    # goes before any tenant's turn.
    with unit_of_work(engine) as session:
        session.execute(update(Evaluation).where(Evaluation.id == rest_a[-1]).values(priority=0))
    with unit_of_work(engine) as session:
        claim = claims.claim_batch(session, first_b, max_versions=2, lease_s=60)
        claimed = [e.id for e in claim.evaluations]
        claims.release(session, claim.token, claimed, reason="looked only")
    assert claimed == [first_b, rest_a[-1]]


def test_a_suite_past_the_tenants_quota_is_refused_and_nothing_is_stored(tenants, engine):
    body = {"tenant": "quota-a", "base_model": BASE, "examples": [{"prompt": "1 =>", "reference": "one"}],
            "metrics": {"exact_match": {"min": 0.5}}}
    assert tenants["quota-a"].post("/v1/eval-suites", json={**body, "name": "own-1"}).status_code == 201
    with Session(engine) as session:
        before = session.scalar(select(func.count()).select_from(EvalSuite))

    refused = tenants["quota-a"].post("/v1/eval-suites", json={**body, "name": "own-2"})

    assert_refused(refused, 409, "quota_exceeded",
                   "tenant 'quota-a' owns 1 eval suites, its quota (LORAPLANE_TENANT_MAX_SUITES is 1)")
    with Session(engine) as session:
        assert session.scalar(select(func.count()).select_from(EvalSuite)) == before
