"""A base and pools of their own ("gateway-base", "gw-chat", "gw-code", "gw-canary"), so what these tests
promote never touches other tests' active sets, and the versions they promote: uploaded through
the API, their evaluation recorded as a worker would, and promoted and approved through the API
(no engine runs)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from devkit.pipeline_steps import create_suite, promoter

BASE, SUITE = "gateway-base", "gateway-suite"
POOLS = ("gw-chat", "gw-code", "gw-canary")  # the last one's set is only the canary test's
seeds = itertools.count(700)


@pytest.fixture(scope="session")
def gateway_pools(admin: httpx.Client, tiny_base: Path) -> tuple[str, ...]:
    config = json.loads((tiny_base / "config.json").read_text())
    assert admin.post("/v1/base-models", json={"name": BASE, "config": config}).status_code == 201
    create_suite(admin, SUITE, BASE, [{"prompt": "1 2 =>", "reference": "one two"}],
                 {"exact_match": {"min": 0.5}, "parity": {"max_logprob_diff": 0.01}})
    for pool in POOLS:
        response = admin.post("/v1/pools", json={"name": pool, "base_model": BASE, "dtype": "float32",
                                                 "max_loras": 2, "max_cpu_loras": 16, "max_lora_rank": 16})
        assert response.status_code == 201, response.text
    return POOLS


@pytest.fixture(scope="session")
def promote_to(gateway_pools, admin, uploader, engine, tiny_base, tmp_path_factory) -> Callable[..., dict]:
    """promote_to(pool, "name", alias="production", weight=None): a new version of acme/name,
    promoted in the pool under the alias."""
    from devkit.tiny_model import build_adapter

    root = tmp_path_factory.mktemp("gateway-adapters")

    def promote(pool: str, name: str, alias: str = "production", weight: int | None = None) -> dict:
        seed = next(seeds)
        folder = build_adapter(tiny_base, root / f"{name}-{seed}", r=8, lora_alpha=16,
                               target_modules=("q_proj", "v_proj"), seed=seed, base_model_name=BASE)
        return promoter(admin, uploader, engine, pool, SUITE)(name, folder, alias, weight)

    return promote
