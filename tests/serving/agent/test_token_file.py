"""The agent on Kubernetes: it presents its pod's projected service-account token
(LORAPLANE_AGENT_TOKEN_FILE), reads it again whenever the kubelet renews it, and is the node its
pod's name says. Against a real registry process that admits the tokens of a real issuer on
loopback, and a vLLM stand-in (stand_ins.py): no engine is needed to authenticate and report."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from devkit import services
from serving.agent.settings import AgentSettings
from serving.agent.token_file import TokenFile
from serving.registry_client import RegistryClient
from tests.support.cli import LORAPLANE
from tests.support.k8s_issuer import Issuer, mint, pod_claims, rsa_key, start_k8s_registry

ACCOUNT = "loraplane-agents"
POOL = "k8s-agents"
POD = "k8s-node-0"


def write_token(path: Path, token: str) -> None:
    """As the kubelet renews a projected token: the new file whole, swapped in at once."""
    staged = path.with_name(f".{path.name}.new")
    staged.write_text(token)
    staged.replace(path)


class Recorder:
    """A registry's /v1/whoami on loopback that keeps the Authorization header of every call."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                recorder.seen.append(self.headers.get("Authorization", ""))
                body = json.dumps({"role": "node"}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.fast
def test_each_request_carries_the_token_the_file_holds_now(tmp_path):
    key, path = rsa_key("k1"), tmp_path / "token"
    first, renewed = (mint(key, pod_claims("https://k8s", pod=POD, issued_at=int(time.time()) + n))
                      for n in (0, 1))
    write_token(path, first)
    recorder = Recorder()

    async def calls() -> None:
        client = RegistryClient(recorder.url, TokenFile(path), POOL, 5)
        await client.whoami()
        await client.whoami()
        write_token(path, renewed)
        await client.whoami()
        path.unlink()  # gone for a moment: the token read last is sent
        await client.whoami()
        await client.close()

    try:
        asyncio.run(calls())
    finally:
        recorder.close()
    assert recorder.seen == [f"Bearer {first}", f"Bearer {first}", f"Bearer {renewed}", f"Bearer {renewed}"]


def settings(**env: str) -> AgentSettings:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LORAPLANE_AGENT_")}
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update({**clean, **env})
    try:
        return AgentSettings(pool=POOL, registry_url="http://127.0.0.1:9")
    finally:
        os.environ.clear()
        os.environ.update(saved)


@pytest.mark.fast
def test_the_node_id_is_the_pods_name_and_one_credential_is_given(tmp_path):
    path = tmp_path / "token"
    write_token(path, mint(rsa_key("k1"), pod_claims("https://k8s", pod=POD)))
    assert settings(LORAPLANE_AGENT_TOKEN_FILE=str(path)).node_id == POD
    assert settings(LORAPLANE_AGENT_TOKEN_FILE=str(path), LORAPLANE_AGENT_NODE_ID=POD).node_id == POD
    assert settings(LORAPLANE_AGENT_TOKEN_FILE=str(path), LORAPLANE_AGENT_NODE_TOKEN="").node_token is None

    unfit = tmp_path / "unfit"
    write_token(unfit, mint(rsa_key("k1"), pod_claims("https://k8s", pod="web.k8s-node-0")))
    for env, message in [
        ({}, "give exactly one of LORAPLANE_AGENT_NODE_TOKEN (a node token) and LORAPLANE_AGENT_TOKEN_FILE "
             "(the pod's projected service-account token on Kubernetes); neither is set"),
        ({"LORAPLANE_AGENT_TOKEN_FILE": str(path), "LORAPLANE_AGENT_NODE_TOKEN": "lpt_x"},
         "give exactly one of LORAPLANE_AGENT_NODE_TOKEN (a node token) and LORAPLANE_AGENT_TOKEN_FILE "
         "(the pod's projected service-account token on Kubernetes); both are set"),
        ({"LORAPLANE_AGENT_TOKEN_FILE": str(unfit)},
         "the pod's name 'web.k8s-node-0' (from LORAPLANE_AGENT_TOKEN_FILE) is not a node id"),
        ({"LORAPLANE_AGENT_TOKEN_FILE": str(tmp_path / "absent")},
         f"the token file {str(tmp_path / 'absent')!r} cannot be read: No such file or directory"),
    ]:
        with pytest.raises(ValidationError) as refused:
            settings(**env)
        assert message in str(refused.value)


@pytest.mark.fast
def test_a_node_id_that_is_not_the_pods_name_stops_the_agent_naming_both(tmp_path):
    path = tmp_path / "token"
    token = mint(rsa_key("k1"), pod_claims("https://k8s", pod=POD))
    write_token(path, token)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LORAPLANE_")}
    result = subprocess.run([LORAPLANE, "agent", "--pool", POOL, "--registry", "http://127.0.0.1:9",
                             "--node-id", "node-7"], capture_output=True, text=True, timeout=60,
                            env={**clean, "COLUMNS": "200", "LORAPLANE_AGENT_TOKEN_FILE": str(path)})
    assert result.returncode == 1
    assert ("error: LORAPLANE_AGENT_NODE_ID (or --node-id) is 'node-7', but the pod's token "
            f"(LORAPLANE_AGENT_TOKEN_FILE) names pod '{POD}'") in result.stderr
    assert token.split(".")[2] not in result.stdout + result.stderr  # the token is never echoed


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    served = Issuer(rsa_key("agents-1"))
    yield served
    served.close()


@pytest.fixture(scope="module")
def k8s_registry(service_dir, registry, tokens, admin, issuer):
    response = admin.post("/v1/pools", json={"name": POOL, "base_model": "serving-base", "max_loras": 2,
                                             "max_cpu_loras": 4, "max_lora_rank": 16})
    assert response.status_code == 201, response.text
    server = start_k8s_registry(service_dir / "registry-k8s-agents", registry, issuer.url, {f"llm/{ACCOUNT}": POOL})
    yield server
    server.stop()


def last_report_age(admin: httpx.Client) -> float | None:
    nodes = {node["node_id"]: node for node in admin.get(f"/v1/pools/{POOL}/rollout").json()["nodes"]}
    return nodes[POD]["seconds_since_report"] if POD in nodes else None


def test_the_agent_reports_as_its_pod_and_follows_the_renewed_token(
        k8s_registry, issuer, vllm, admin, service_dir, tmp_path):
    first_key, next_key = issuer.keys[0], rsa_key("agents-2")
    path = tmp_path / "token"
    write_token(path, mint(first_key, pod_claims(issuer.url, service_account=ACCOUNT, pod=POD)))
    agent = services.start_agent(service_dir / "agent-k8s", pool=POOL, vllm_url=vllm.url,
                                 registry_url=k8s_registry.url, token="", node_id=POD,
                                 metrics_port=services.free_port(),
                                 settings={"LORAPLANE_AGENT_TOKEN_FILE": str(path)})
    try:
        services.wait_for(lambda: last_report_age(admin) is not None, timeout_s=30, what="the pod's first report")

        # The cluster rotates its key and drops the old one; the registry learns it from the
        # first token signed with the new key, after which the old token admits nobody.
        issuer.keys = [next_key]
        probe = mint(next_key, pod_claims(issuer.url, service_account=ACCOUNT, pod="probe-0"))
        assert httpx.get(f"{k8s_registry.url}/v1/whoami",
                         headers={"Authorization": f"Bearer {probe}"}).json()["instance_id"] == "probe-0"
        old = mint(first_key, pod_claims(issuer.url, service_account=ACCOUNT, pod=POD))
        assert httpx.get(f"{k8s_registry.url}/v1/whoami",
                         headers={"Authorization": f"Bearer {old}"}).status_code == 401

        write_token(path, mint(next_key, pod_claims(issuer.url, service_account=ACCOUNT, pod=POD)))
        time.sleep(3)  # the agent reports every second: with the old token each report would fail
        assert services.wait_for(lambda: (last_report_age(admin) or 99) < 1.5, timeout_s=10,
                                 what="a report with the renewed token")
        assert "read the renewed service-account token" in agent.log.read_text()
    finally:
        services.stop_group(agent)
    assert "eyJ" not in agent.log.read_text() + k8s_registry.log.read_text()
