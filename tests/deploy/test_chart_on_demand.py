"""A pool with `onDemand`: its vLLM loads loraplane's resolver plugin and reaches the agent's
socket, and a pool without it has none of that."""

from __future__ import annotations

import re

import pytest

from tests.deploy.chart import CHART, PROFILES, container, env_of, name, objects, one, pod_spec

pytestmark = pytest.mark.fast
DOCKERFILE = CHART.parents[2] / "Dockerfile"


def mounts(item: dict) -> dict[str, dict]:
    return {m["mountPath"]: m for m in item.get("volumeMounts", [])}


def value(item: dict, variable: str) -> str:
    return env_of(item)[variable]["value"]


def test_an_on_demand_pool_wires_the_plugin_to_the_agent():
    pod = pod_spec(one(objects(PROFILES["two-pools"]), "StatefulSet", name("pool-code")))
    agent, vllm, copier = (container({"spec": {"template": {"spec": pod}}}, c) for c in ("agent", "vllm", "vllm-plugin"))
    volumes = {v["name"]: v for v in pod["volumes"]}

    assert value(agent, "LORAPLANE_AGENT_RESOLVER") == "on"
    socket = value(agent, "LORAPLANE_AGENT_RESOLVER_SOCKET")
    assert value(vllm, "LORAPLANE_RESOLVER_SOCKET") == socket
    folder = socket.rsplit("/", 1)[0]
    # The same pod-local volume at the socket's folder in both, and nowhere else.
    assert mounts(agent)[folder]["name"] == mounts(vllm)[folder]["name"] == "resolver-socket"
    assert volumes["resolver-socket"]["emptyDir"]["medium"] == "Memory"
    # The agent gives up before vLLM's resolver stops waiting for it.
    assert int(value(agent, "LORAPLANE_AGENT_RESOLVER_DEADLINE_S")) < int(value(vllm, "LORAPLANE_RESOLVER_DEADLINE_S")) == 45

    # The plugin is copied, before the agent starts, into the folder on vLLM's PYTHONPATH,
    # from where the loraplane image installs it.
    assert [c["name"] for c in pod["initContainers"]][:2] == ["vllm-plugin", "agent"]
    source, target = copier["command"][-2:]
    plugins = value(vllm, "PYTHONPATH")
    assert mounts(copier)[target.rstrip("/")]["name"] == mounts(vllm)[plugins]["name"] == "vllm-plugins"
    assert mounts(vllm)[plugins]["readOnly"] is True
    installed = re.search(r"--target (\S+) \./plugins/vllm-resolver", DOCKERFILE.read_text())
    assert installed is not None and source == installed.group(1) + "/."


def test_a_pool_that_refuses_overflow_has_no_resolver():
    pod = pod_spec(one(objects(PROFILES["two-pools"]), "StatefulSet", name("pool-chat")))
    wrapped = {"spec": {"template": {"spec": pod}}}
    assert "vllm-plugin" not in [c["name"] for c in pod["initContainers"]]
    assert not {"LORAPLANE_AGENT_RESOLVER", "LORAPLANE_AGENT_RESOLVER_SOCKET"} & set(env_of(container(wrapped, "agent")))
    assert not {"LORAPLANE_RESOLVER_SOCKET", "PYTHONPATH"} & set(env_of(container(wrapped, "vllm")))
    assert not {"vllm-plugins", "resolver-socket"} & {v["name"] for v in pod["volumes"]}
