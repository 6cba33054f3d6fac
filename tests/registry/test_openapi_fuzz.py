"""Schemathesis generates requests from the OpenAPI schema; no input may cause a 5xx.

It runs against a registry on a database of its own, with a broker of its own: with a global
admin's token it changes whatever it reaches (a pool's suites, policies, canary settings), and
every other test relies on the shared database's pools as their fixtures made them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from devkit import services
from registry.auth.principal import Role
from registry.db import make_engine
from registry.tokens import issuing as token_service
from tests.conftest import BASE_NAME
from devkit.units_of_work import unit_of_work

SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"


@pytest.fixture(scope="module")
def fuzzed(postgres, registry, service_dir, tiny_base) -> tuple[str, str]:
    """(registry URL, a global admin's token) on the database `openapi_fuzz`, with the base model."""
    from migrations import runner

    url = services.create_database(postgres.url, "openapi_fuzz")
    runner.upgrade(url)
    engine = make_engine(url)
    with unit_of_work(engine) as session:
        _, token = token_service.create_token(session, subject="fuzzer", role=Role.ADMIN, tenant=None, actor="tests")
    engine.dispose()
    env = {key: value for key, value in registry.env.items() if key.startswith("LORAPLANE_")}
    env.pop("LORAPLANE_PUBLIC_URL", None)
    env.pop("LORAPLANE_DATA_DIR", None)
    env.update(LORAPLANE_DATABASE_URL=url, LORAPLANE_BROKER_URL="")  # a folder queue of its own
    server = services.start_registry(service_dir / "registry-fuzz", env)
    config = json.loads((tiny_base / "config.json").read_text())
    created = httpx.post(f"{server.url}/v1/base-models", headers={"Authorization": f"Bearer {token}"}, timeout=60,
                         json={"name": BASE_NAME, "config": config})
    assert created.status_code == 201, created.text
    yield server.url, token
    server.stop()


def test_no_generated_request_causes_a_server_error(fuzzed, tmp_path):
    url, token = fuzzed
    result = subprocess.run(
        [str(SCHEMATHESIS), "run", f"{url}/openapi.json",
         "--checks", "not_a_server_error",
         "--header", f"Authorization: Bearer {token}",
         "--max-examples", "20", "--seed", "7", "--request-timeout", "30",
         "--phases", "examples,coverage,fuzzing", "--continue-on-failure",
         # Random ids would revoke the fuzzer's own token; its only inputs (an id and a flag) are
         # exercised by the authorization matrix and token tests.
         "--exclude-path", "/v1/tokens/{token_id}/revoke",
         # Likewise a rotation with a random overlap (0 s included) would end the trust in the
         # key the session's nodes pinned (the key folder is shared); rotation has tests of its own.
         "--exclude-path", "/v1/attestation-keys/rotate"],
        capture_output=True, text=True, timeout=900, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    generated = re.search(r"(\d+) generated", result.stdout)
    assert generated and int(generated.group(1)) > 300, result.stdout[-3000:]
    assert "Server error" not in result.stdout
