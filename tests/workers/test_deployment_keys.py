"""A worker or housekeeper starts only with the registry's keys (registry/deployment_keys/): run
as `loraplane housekeeper` and `loraplane worker` are run, with the registry's settings as
compose.yaml gives them, and with the secret or the attestation keys of their own that compose
used to leave them with."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from devkit import services
from devkit.services import VENV_BIN


def _start(command: list[str], env: dict[str, str], log: Path, timeout_s: float = 60) -> tuple[int | None, str]:
    """(exit code, or None once it said it is ready; what it printed)."""
    process = subprocess.Popen([str(VENV_BIN / "loraplane"), *command], stdout=log.open("wb"),
                               stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            printed = log.read_text(errors="replace")
            if process.poll() is not None:
                return process.returncode, printed
            if "ready." in printed:
                return None, printed
            time.sleep(0.2)
        raise AssertionError(f"{command} neither started nor exited in {timeout_s} s:\n{log.read_text()[-2000:]}")
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=30)


def _env(registry: services.Service, folder: Path, **changes: str | None) -> dict[str, str]:
    """The registry's settings (as compose gives every process), in a data folder of its own."""
    folder.mkdir(parents=True, exist_ok=True)
    env = {**registry.env, "LORAPLANE_DATA_DIR": str(folder), "LORAPLANE_ENGINE_BASE_MODEL": "no-engine"}
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def test_a_housekeeper_with_the_registrys_keys_starts(registry, tmp_path):
    code, printed = _start(["housekeeper"], _env(registry, tmp_path / "data"), tmp_path / "log")
    assert code is None, printed[-2000:]
    assert "refuse" not in printed.lower()


def test_a_housekeeper_without_the_registrys_secret_refuses_to_start_naming_it(registry, tmp_path):
    data = tmp_path / "data"
    code, printed = _start(["housekeeper"], _env(registry, data, LORAPLANE_SECRET_KEY=None), tmp_path / "log")
    assert code == 1, printed[-2000:]
    assert ("this housekeeper does not hold the registry's LORAPLANE_SECRET_KEY (it is not set here, so "
            f"this process made its own in {data / 'secret.key'})") in printed
    assert "Set LORAPLANE_SECRET_KEY to the registry's value" in printed
    assert "ready." not in printed


def test_a_worker_with_another_secret_refuses_to_start(registry, tmp_path):
    env = _env(registry, tmp_path / "data", LORAPLANE_SECRET_KEY="another-secret-" + "x" * 32)
    code, printed = _start(["worker", "--hostname", "keys@%h"], env, tmp_path / "log")
    assert code == 1, printed[-2000:]
    assert "this worker does not hold the registry's LORAPLANE_SECRET_KEY (it is set here, to another value)" in printed


def test_a_housekeeper_with_attestation_keys_of_its_own_refuses_to_start_naming_them(registry, tmp_path):
    own_keys = tmp_path / "own-keys"
    env = _env(registry, tmp_path / "data", LORAPLANE_ATTESTATION_KEY_DIR=str(own_keys))
    code, printed = _start(["housekeeper"], env, tmp_path / "log")
    assert code == 1, printed[-2000:]
    assert "this housekeeper does not hold the registry's attestation key" in printed
    assert f"LORAPLANE_ATTESTATION_KEY_DIR={own_keys}" in printed
    assert "Give it the registry's keys" in printed


def test_a_migration_with_another_secret_seals_and_signs_nothing(registry, tmp_path):
    env = _env(registry, tmp_path / "data", LORAPLANE_SECRET_KEY="another-secret-" + "y" * 32)
    sealed = subprocess.run([str(VENV_BIN / "loraplane"), "db", "seal-active-sets"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert sealed.returncode == 1, sealed.stdout + sealed.stderr
    assert ("this loraplane db seal-active-sets does not hold the registry's LORAPLANE_SECRET_KEY "
            "(it is set here, to another value)") in sealed.stdout + sealed.stderr
    assert "active set signed" not in sealed.stdout
