"""`loraplane router` (and the agent, for its registry) refuses bad settings before it starts,
naming the variable to fix."""

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



def serving_command(command: str, registry: str, **env: str) -> list[str]:
    """argv and env of the agent or router against `registry`, with a token set."""
    token = {"agent": "LORAPLANE_AGENT_NODE_TOKEN", "router": "LORAPLANE_ROUTER_TOKEN"}[command]
    extra = ["--node-id", "n1"] if command == "agent" else []
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LORAPLANE_")}
    return [LORAPLANE, command, "--pool", "chat", "--registry", registry, *extra], \
        {**clean, "COLUMNS": "200", token: "lpt_x", **env}


@pytest.mark.parametrize("command", ["agent", "router"])
def test_a_plain_http_registry_on_another_host_is_refused_unless_allowed_by_name(command, tmp_path):
    """Its token would cross the network in clear."""
    argv, env = serving_command(command, "http://registry.invalid:8000", LORAPLANE_AGENT_STATE_DIR=str(tmp_path))
    refused = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1
    assert "the registry is http:// on registry.invalid, another host" in refused.stderr
    assert f"LORAPLANE_{command.upper()}_ALLOW_INSECURE_REGISTRY=true" in refused.stderr
    assert "lpt_x" not in refused.stdout + refused.stderr


def test_an_allowed_plain_http_registry_is_announced_at_every_start(tmp_path):
    argv, env = serving_command("agent", "http://registry.invalid:9", LORAPLANE_AGENT_STATE_DIR=str(tmp_path),
                                LORAPLANE_AGENT_ALLOW_INSECURE_REGISTRY="true", LORAPLANE_AGENT_METRICS_PORT="0")
    agent = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        first_line = agent.stdout.readline()
    finally:
        agent.terminate()
        agent.wait(timeout=30)
    assert "INSECURE: the registry is plain http:// on registry.invalid" in first_line
    assert "LORAPLANE_AGENT_ALLOW_INSECURE_REGISTRY" in first_line
