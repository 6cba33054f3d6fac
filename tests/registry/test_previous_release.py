"""The previous release's code runs against the new schema: a rolling upgrade migrates first,
and the previous release's registries keep serving beside the new ones until they are replaced.
The previous release is the newest released version in CHANGELOG.md, taken from git at the
commit it names, and run in this checkout's environment."""

from __future__ import annotations

import io
import json
import re
import subprocess
import tarfile
from pathlib import Path

import httpx
import pytest

from devkit import services
from devkit.units_of_work import unit_of_work
from migrations import runner
from registry.auth.principal import Role
from registry.db import make_engine
from registry.tokens import issuing
from tests.conftest import BUCKET

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("registry", "web", "loraplane", "loraplane_client", "migrations", "serving", "workers", "devkit",
            "signed_digests")
RELEASED = re.compile(r"^## (?P<version>\d+\.\d+\.\d+)\n\nCut from commit `(?P<commit>[0-9a-f]{40})`", re.M)


def previous_release() -> tuple[str, str]:
    found = RELEASED.search((ROOT / "CHANGELOG.md").read_text())
    assert found, "CHANGELOG.md names no released version with the commit it was cut from"
    return found["version"], found["commit"]


@pytest.fixture(scope="module")
def previous_code(tmp_path_factory) -> Path:
    version, commit = previous_release()
    folder = tmp_path_factory.mktemp(f"release-{version}")
    git = ["git", "-C", str(ROOT)]
    if subprocess.run([*git, "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True).returncode:
        # A shallow clone lacks the release: fetch the history it was cut from.
        subprocess.run([*git, "fetch", "--quiet", "--unshallow"], capture_output=True)
    assert subprocess.run([*git, "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True).returncode == 0, \
        f"this clone lacks {version}'s commit {commit}: clone the whole history (no --depth)"
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", commit, *PACKAGES],
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    return folder


@pytest.fixture(scope="module")
def upgraded(postgres) -> str:
    """A database on this checkout's newest schema."""
    url = services.create_database(postgres.url, "previous_release")
    runner.upgrade(url)
    return url


@pytest.fixture(scope="module")
def admin_token(upgraded) -> str:
    engine = make_engine(upgraded, pooled=False)
    with unit_of_work(engine) as session:
        _, plain = issuing.create_token(session, subject="upgrader", role=Role.ADMIN, tenant=None,
                                        actor="tests")
    engine.dispose()
    return plain


def registry_env(url: str, s3, redis) -> dict[str, str]:
    return {"LORAPLANE_DATABASE_URL": url, "LORAPLANE_BROKER_URL": redis.url, "LORAPLANE_STORAGE": "s3",
            "LORAPLANE_S3_ENDPOINT_URL": s3.url, "LORAPLANE_S3_BUCKET": BUCKET}


@pytest.fixture(scope="module")
def old_registry(service_dir, previous_code, upgraded, s3, redis):
    # PYTHONPATH puts the previous release's packages before this checkout's installed ones.
    server = services.start_registry(service_dir / "registry-previous-release",
                                     {**registry_env(upgraded, s3, redis), "PYTHONPATH": str(previous_code)})
    yield server
    server.stop()


@pytest.fixture(scope="module")
def new_registry(service_dir, old_registry, upgraded, s3, redis):
    server = services.start_registry(service_dir / "registry-this-release", registry_env(upgraded, s3, redis))
    yield server
    server.stop()


def client(server, token: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


def upload(api: httpx.Client, adapter: str, folder: Path) -> dict:
    files = [("file", (name, (folder / name).read_bytes()))
             for name in ("adapter_config.json", "adapter_model.safetensors")]
    response = api.post(f"/v1/adapters/acme/{adapter}/versions", files=files)
    assert response.status_code == 201, response.text
    return response.json()


def test_the_previous_release_runs_on_the_new_schema_beside_this_one(old_registry, new_registry, admin_token,
                                                                     previous_code, tiny_base, make_adapter):
    old, new = client(old_registry, admin_token), client(new_registry, admin_token)
    # Truly the previous code: it has no lifecycle endpoints.
    assert not (previous_code / "registry" / "lifecycle").exists()
    assert old.post("/v1/adapters/acme/anything/retire").status_code in (404, 405)
    assert old.get("/readyz").json()["ready"] is True

    # The previous release writes: a tenant, a base, a pool, an upload.
    assert old.post("/v1/tenants", json={"name": "acme"}).status_code == 201
    config = json.loads((tiny_base / "config.json").read_text())
    made = old.post("/v1/base-models", json={"name": "tiny-llama", "config": config, "aliases": [str(tiny_base)]})
    assert made.status_code == 201, made.text
    pool = old.post("/v1/pools", json={"name": "upgrading", "base_model": "tiny-llama", "max_loras": 2,
                                       "max_cpu_loras": 4, "max_lora_rank": 16})
    assert pool.status_code == 201, pool.text
    written_by_old = upload(old, "from-old", make_adapter(seed=81))

    # This release reads what the previous one wrote, with what it added (the lifecycle's state).
    read = new.get("/v1/adapters/acme/from-old/versions/1")
    assert read.status_code == 200, read.text
    assert read.json()["digest"] == written_by_old["digest"]
    assert new.get("/v1/adapters", params={"tenant": "acme"}).status_code == 200

    # And the previous release reads what this one wrote.
    written_by_new = upload(new, "from-new", make_adapter(seed=82))
    seen = old.get("/v1/adapters/acme/from-new/versions/1")
    assert seen.status_code == 200, seen.text
    assert seen.json()["digest"] == written_by_new["digest"]
    assert old.get("/v1/pools/upgrading").json()["name"] == "upgrading"
