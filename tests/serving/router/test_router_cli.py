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


K8S = {"LORAPLANE_ROUTER_TOKEN": "lpt_x", "LORAPLANE_ROUTER_NODE_ADDRESSES": "kubernetes",
       "LORAPLANE_ROUTER_K8S_SERVICE": "serving/chat-vllm", "KUBERNETES_SERVICE_HOST": ""}


@pytest.mark.parametrize(("env", "message"), [
    ({**K8S, "LORAPLANE_ROUTER_NODE_ADDRESSES": "dns"},
     "node_addresses (LORAPLANE_ROUTER_NODE_ADDRESSES): Input should be 'registry' or 'kubernetes'"),
    ({**K8S, "LORAPLANE_ROUTER_K8S_SERVICE": ""},
     "LORAPLANE_ROUTER_NODE_ADDRESSES=kubernetes needs LORAPLANE_ROUTER_K8S_SERVICE: namespace/name of "
     "the pool's headless Service"),
    ({**K8S, "LORAPLANE_ROUTER_K8S_SERVICE": "chat-vllm"},
     "k8s_service (LORAPLANE_ROUTER_K8S_SERVICE): 'chat-vllm' is not namespace/name of a Service, such as "
     "'loraplane/chat-vllm'"),
    (K8S, "LORAPLANE_ROUTER_NODE_ADDRESSES=kubernetes outside a Kubernetes pod (no KUBERNETES_SERVICE_HOST, or "
          "no service-account token in /var/run/secrets/kubernetes.io/serviceaccount): set "
          "LORAPLANE_ROUTER_K8S_API_URL"),
    ({**K8S, "LORAPLANE_ROUTER_K8S_API_URL": "http://10.0.0.1:6443"},
     "LORAPLANE_ROUTER_K8S_API_URL is http:// on 10.0.0.1, another host"),
    ({**K8S, "LORAPLANE_ROUTER_K8S_SCHEME": "grpc"},
     "k8s_scheme (LORAPLANE_ROUTER_K8S_SCHEME): Input should be 'http' or 'https'"),
    ({**K8S, "LORAPLANE_ROUTER_K8S_PORT_NAME": "vLLM"},
     "k8s_port_name (LORAPLANE_ROUTER_K8S_PORT_NAME): 'vLLM' is not a port name as the pool's Service names "
     "vLLM's port, such as 'vllm'"),
])
def test_bad_kubernetes_settings_name_the_variable_to_fix(env, message):
    result = router_command("--pool", "chat", **env)
    assert result.returncode == 1
    assert f"error: {message}" in result.stderr


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
