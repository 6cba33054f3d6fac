"""compose.yaml is valid for Docker Compose (no engine needed to check it), wires every service
to the others, checks each one's health, and publishes no vLLM port on the host."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

COMPOSE = Path(__file__).parents[1] / "compose.yaml"
SECRETS = {"LORAPLANE_DB_PASSWORD": "db-secret", "MINIO_ROOT_PASSWORD": "s3-secret",
           "LORAPLANE_SECRET_KEY": "signing-secret", "LORAPLANE_BASE_MODEL_DIR": "/srv/models/base"}
needs_compose = pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose is not installed")


def config(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["docker-compose", "-f", str(COMPOSE), "config"], capture_output=True,
                          text=True, env=env, timeout=60)


@pytest.fixture(scope="module")
def services() -> dict:
    result = config({**os.environ, **SECRETS, "LORAPLANE_POOL": "chat"})
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)["services"]


@needs_compose
def test_every_part_of_the_pipeline_is_there_and_wired(services):
    assert set(services) == {"postgres", "redis", "minio", "minio-init", "migrate", "registry", "worker",
                             "housekeeper", "eval-vllm", "serving-vllm", "agent", "router"}
    registry, worker = services["registry"]["environment"], services["worker"]["environment"]
    assert registry["LORAPLANE_STORAGE"] == "s3" and "db-secret" in registry["LORAPLANE_DATABASE_URL"]
    assert registry["LORAPLANE_BROKER_URL"] == worker["LORAPLANE_BROKER_URL"] == "redis://redis:6379/0"
    assert services["registry"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert worker["LORAPLANE_ENGINE_URL"] == "http://eval-vllm:8000"
    assert services["worker"]["depends_on"]["eval-vllm"]["condition"] == "service_healthy"
    assert "--vllm-url" in services["agent"]["command"] and "http://serving-vllm:8000" in services["agent"]["command"]
    assert services["agent"]["command"][services["agent"]["command"].index("--pool") + 1] == "chat"
    assert services["router"]["ports"][0]["published"] in (8090, "8090")


@needs_compose
def test_no_vllm_is_reachable_from_the_host_and_runtime_lora_is_on(services):
    for name in ("eval-vllm", "serving-vllm"):
        vllm = services[name]
        assert "ports" not in vllm, f"{name} publishes its runtime LoRA endpoints"
        assert vllm["environment"]["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
        assert "--enable-lora" in vllm["command"]
        assert vllm["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    published = {name for name, s in services.items() if s.get("ports")}
    assert published == {"registry", "router"}


@needs_compose
def test_long_running_services_check_their_health(services):
    one_shot = {"minio-init", "migrate"}
    unchecked = {name for name, s in services.items()
                 if name not in one_shot | {"worker", "housekeeper"} and "healthcheck" not in s}
    assert unchecked == set()
    assert services["serving-vllm"]["profiles"] == services["agent"]["profiles"] == ["serving"]


@needs_compose
@pytest.mark.parametrize("missing", sorted(SECRETS))
def test_compose_refuses_to_run_without_its_secrets(missing):
    env = {**{k: v for k, v in os.environ.items() if k not in SECRETS}, **SECRETS}
    del env[missing]
    result = config(env)
    assert result.returncode != 0
    assert f"set {missing}" in result.stderr


def _mounts(service: dict) -> dict[str, str]:
    """Mount point -> source of each volume (docker-compose writes them long or short)."""
    found = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            found[volume["target"]] = volume["source"]
        else:
            source, target, *_ = volume.split(":")
            found[target] = source
    return found


@needs_compose
def test_every_process_that_seals_or_signs_holds_the_registrys_keys(services):
    """The migration (it seals pools made before sets were signed), the registry, the worker (its
    evaluations are audited, a re-qualification changes a set) and the housekeeper (a canary it
    promotes is signed at its commit) seal with one secret and sign with one keyring: a process
    with keys of its own writes audit events that read as altered, and signatures nodes refuse."""
    registry = services["registry"]["environment"]
    key_dir = registry["LORAPLANE_ATTESTATION_KEY_DIR"]
    assert registry["LORAPLANE_SECRET_KEY"] == SECRETS["LORAPLANE_SECRET_KEY"]
    for name in ("migrate", "registry", "worker", "housekeeper"):
        env = services[name]["environment"]
        assert env.get("LORAPLANE_SECRET_KEY") == registry["LORAPLANE_SECRET_KEY"], name
        assert env.get("LORAPLANE_ATTESTATION_KEY_DIR") == key_dir, name
        assert _mounts(services[name]).get(key_dir) == "attestation-keys", name
