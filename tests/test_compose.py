"""compose.yaml is valid for Docker Compose (no engine needed to check it)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

COMPOSE = Path(__file__).parents[1] / "compose.yaml"


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose is not installed")
def test_compose_file_is_valid_and_wires_the_registry():
    env = {**os.environ, "LORAPLANE_DB_PASSWORD": "db-secret", "MINIO_ROOT_PASSWORD": "s3-secret"}
    result = subprocess.run(["docker-compose", "-f", str(COMPOSE), "config"], capture_output=True,
                            text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(result.stdout)
    registry = config["services"]["registry"]
    assert registry["environment"]["LORAPLANE_STORAGE"] == "s3"
    assert "db-secret" in registry["environment"]["LORAPLANE_DATABASE_URL"]
    assert registry["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose is not installed")
def test_compose_refuses_to_run_without_secrets():
    env = {k: v for k, v in os.environ.items() if k not in ("LORAPLANE_DB_PASSWORD", "MINIO_ROOT_PASSWORD")}
    result = subprocess.run(["docker-compose", "-f", str(COMPOSE), "config"], capture_output=True,
                            text=True, env=env, timeout=60)
    assert result.returncode != 0
    assert "set LORAPLANE_DB_PASSWORD" in result.stderr
