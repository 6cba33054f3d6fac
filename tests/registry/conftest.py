"""A base of its own ("promo-base"), so required suites here never touch other tests' uploads,
and pools with the limits each gate needs."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from devkit.pipeline_steps import create_suite, evaluations_of, finish_evaluation, upload_dir
from registry.auth.principal import Role
from registry.tokens import issuing as token_service
from devkit.units_of_work import unit_of_work

PROMO_BASE = "promo-base"
# Each worker's adapters are its own bytes: the lanes share one database, and two versions of the
# same seed would share their weights' blob (blob collection counts what other versions name).
seeds = itertools.count(100 + 100_000 * int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0))


@pytest.fixture(scope="session")
def promo_pools(admin: httpx.Client, tiny_base: Path) -> dict[str, str]:
    config = json.loads((tiny_base / "config.json").read_text())
    assert admin.post("/v1/base-models", json={"name": PROMO_BASE, "config": config}).status_code == 201
    create_suite(admin, "promo-suite", PROMO_BASE, [{"prompt": "1 2 =>", "reference": "one two"}],
                 {"exact_match": {"min": 0.5}, "parity": {"max_logprob_diff": 0.01}})
    pools = {
        "gated": {"max_loras": 2, "max_cpu_loras": 4, "max_lora_rank": 8,
                  "required_suites": ["promo-suite"]},
        "open": {"max_loras": 2, "max_cpu_loras": 64, "max_lora_rank": 16},
        "small": {"max_loras": 1, "max_cpu_loras": 1, "max_lora_rank": 16},
    }
    names = {}
    for key, limits in pools.items():
        names[key] = f"promo-{key}"
        body = {"name": names[key], "base_model": PROMO_BASE, "dtype": "float32", **limits}
        response = admin.post("/v1/pools", json=body)
        assert response.status_code == 201, response.text
    return names


@pytest.fixture(scope="session")
def client_with(registry) -> Callable[[str], httpx.Client]:
    clients = []

    def make(token: str, url: str | None = None) -> httpx.Client:
        client = httpx.Client(base_url=url or registry.url, timeout=60,
                              headers={"Authorization": f"Bearer {token}"})
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture(scope="session")
def second_reviewer(engine, client_with) -> httpx.Client:
    with unit_of_work(engine) as session:
        _, plain = token_service.create_token(session, subject="acme_reviewer_2", role=Role.REVIEWER,
                                              tenant="acme", actor="tests")
    return client_with(plain)


@pytest.fixture(scope="session")
def make_ready(tiny_base, tmp_path_factory, engine, promo_pools, client_for):
    """Upload a new version of acme/<name> built for promo-base, and record its evaluation."""
    from devkit.tiny_model import build_adapter

    root = tmp_path_factory.mktemp("promo-adapters")

    def make(name: str, *, r: int = 8, passed: bool = True, parity: bool = True,
             uploader: str | httpx.Client = "acme_uploader", evaluate: bool = True) -> dict:
        seed = next(seeds)
        folder = build_adapter(tiny_base, root / f"{name}-{seed}", r=r, lora_alpha=16,
                               target_modules=("q_proj", "v_proj"), seed=seed,
                               base_model_name=PROMO_BASE)
        client = uploader if isinstance(uploader, httpx.Client) else client_for(uploader)
        version = upload_dir(client, f"acme/{name}", folder)
        if evaluate:
            for evaluation in evaluations_of(client_for("acme_admin"), version):
                finish_evaluation(engine, evaluation["id"], passed=passed, parity=parity)
        return version

    return make
