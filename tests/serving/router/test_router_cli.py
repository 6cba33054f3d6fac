"""`loraplane router` refuses bad settings before it starts, naming the variable to fix."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.support.cli import LORAPLANE


def router_command(*args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LORAPLANE_")}
    return subprocess.run([LORAPLANE, "router", "--registry", "http://127.0.0.1:9", *args],
                          capture_output=True, text=True, env={**clean, "COLUMNS": "200", **env}, timeout=60)


@pytest.mark.parametrize(("args", "env", "message"), [
    (["--pool", "chat"], {}, "token (LORAPLANE_ROUTER_TOKEN): Field required"),
    (["--pool", "Bad Pool"], {"LORAPLANE_ROUTER_TOKEN": "lpt_x"},
     "pool (LORAPLANE_ROUTER_POOL): String should match pattern '^[a-z0-9][a-z0-9_-]{0,63}$'"),
    (["--pool", "chat"], {"LORAPLANE_ROUTER_TOKEN": "lpt_x", "LORAPLANE_ROUTER_MAX_INFLIGHT": "4"},
     "LORAPLANE_ROUTER_BATCH_MAX_INFLIGHT (8) must not exceed LORAPLANE_ROUTER_MAX_INFLIGHT (4)"),
    (["--pool", "chat"], {"LORAPLANE_ROUTER_TOKEN": "lpt_x", "LORAPLANE_ROUTER_KEY_CACHE_S": "-1"},
     "key_cache_s (LORAPLANE_ROUTER_KEY_CACHE_S): Input should be greater than or equal to 0"),
])
def test_bad_settings_are_refused_with_the_variable_to_fix(args, env, message):
    result = router_command(*args, **env)
    assert result.returncode == 1
    assert f"error: {message}" in result.stderr
    assert "lpt_x" not in result.stdout + result.stderr  # the token is never echoed


def test_a_missing_token_says_how_to_make_one():
    result = router_command("--pool", "chat")
    assert "hint: Set LORAPLANE_ROUTER_TOKEN (loraplane token create --role router --pool POOL)." in result.stderr
