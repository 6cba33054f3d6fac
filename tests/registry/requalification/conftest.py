"""Bases of their own, so that changing an engine or a config here marks no other test's versions,
and a way to put a version into service: upload, a passed evaluation, promotion, approval."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from devkit.pipeline_steps import evaluations_of, finish_evaluation, request_promotion, upload_dir
from tests.registry.requalification.support import RQ_BASE, RQ_SUITE, register_base_with_suite
from tests.support.nodes import NodeFleet

seeds = itertools.count(700)


@pytest.fixture(scope="session")
def requal_base(admin, tiny_base) -> str:
    register_base_with_suite(admin, tiny_base, RQ_BASE, RQ_SUITE)
    return RQ_BASE


@pytest.fixture(scope="session")
def serve(tiny_base, tmp_path_factory, engine, admin, client_for) -> Callable[..., dict]:
    """Upload `tenant/name` for `base`, pass its evaluation through the worker's claim-and-record
    path, promote it to `pool` as production and approve it (a global admin is the second person)."""
    from devkit.tiny_model import build_adapter

    root = tmp_path_factory.mktemp("requal-adapters")

    def run(pool: str, adapter: str, *, base: str = RQ_BASE, suite: str = RQ_SUITE,
            uploader: str = "acme_uploader") -> dict:
        seed = next(seeds)
        folder = build_adapter(tiny_base, root / f"{adapter.replace('/', '-')}-{seed}", r=8,
                               lora_alpha=16, target_modules=("q_proj", "v_proj"), seed=seed,
                               base_model_name=base)
        client = client_for(uploader)
        version = upload_dir(client, adapter, folder)
        evaluations = evaluations_of(admin, version)
        assert [e["suite"] for e in evaluations] == [suite], evaluations  # the pool's required suite
        finish_evaluation(engine, evaluations[0]["id"])
        promotion = request_promotion(client, pool, version)
        assert promotion.status_code == 201, promotion.text
        approved = admin.post(f"/v1/promotions/{promotion.json()['id']}/approve", json={"comment": "ok"})
        assert approved.status_code == 200, approved.text
        return version

    return run


@pytest.fixture(scope="session")
def fleets(admin) -> Callable[[str], NodeFleet]:
    made: dict[str, NodeFleet] = {}

    def fleet(pool: str) -> NodeFleet:
        if pool not in made:
            made[pool] = NodeFleet(admin, pool)
        return made[pool]

    yield fleet
    for fleet_ in made.values():
        fleet_.close()
