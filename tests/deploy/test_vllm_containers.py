"""Every vLLM container the chart renders, checked by the vLLM the suite runs: its arguments
parse with vLLM's own server parser (and pass its own checks), each VLLM_* variable is one vLLM
reads, and whoever talks to the engine in the pod (the worker, the agent) is pointed at the host
and port it listens on. The process test runs a pool's vLLM; the worker's is not started there
(one engine per module), so a wrong flag, variable or port in it would otherwise reach a cluster
unseen."""

from __future__ import annotations

import json
import subprocess
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.deploy.chart import ROOT, containers, env_of, example, objects, workloads

VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
PARSE = """
import contextlib, io, json, sys
import vllm.envs as envs
from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
from vllm.utils.argparse_utils import FlexibleArgumentParser

answers = []
for case in json.load(sys.stdin):
    answer = {"unknown_env": sorted(n for n in case["env"]
                                    if n.startswith("VLLM_") and n not in envs.environment_variables)}
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            args = make_arg_parser(FlexibleArgumentParser()).parse_args(case["args"])
            validate_parsed_serve_args(args)
        answer.update(error=None, host=args.host, port=args.port, enable_lora=args.enable_lora,
                      max_loras=args.max_loras, max_cpu_loras=args.max_cpu_loras)
    except SystemExit:
        answer["error"] = errors.getvalue().strip().splitlines()[-1:]
    except Exception as error:
        answer["error"] = f"{type(error).__name__}: {error}"
    answers.append(answer)
print(json.dumps(answers))
"""
PROFILES = ["default", "cpu-laptop", "gpu-8b"]


def vllm_containers(values: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(workload, container) for each vLLM container of the rendered chart."""
    return [(workload, c) for workload in workloads(objects(values)) for c in containers(workload)
            if c["command"][:3] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]]


@pytest.fixture(scope="module")
def parsed() -> dict[str, list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]]:
    """Each profile's vLLM containers with what vLLM made of them, in one vLLM import."""
    rendered = {profile: vllm_containers({} if profile == "default" else example(profile)) for profile in PROFILES}
    cases = [{"args": c["args"], "env": list(env_of(c))} for found in rendered.values() for _, c in found]
    run = subprocess.run([str(VLLM_PYTHON), "-c", PARSE], input=json.dumps(cases), capture_output=True,
                         text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    answers = iter(json.loads(run.stdout.strip().splitlines()[-1]))
    return {profile: [(workload, c, next(answers)) for workload, c in found] for profile, found in rendered.items()}


@pytest.mark.parametrize("profile", PROFILES)
def test_every_vllm_container_is_one_vllm_accepts(parsed, profile):
    found = parsed[profile]
    kinds = {workload["metadata"]["name"].rsplit("-", 1)[-1] for workload, _, _ in found}
    assert "worker" in kinds and len(found) >= 2, kinds  # the worker's engine and at least one pool's
    problems = {f"{workload['metadata']['name']}/{c['name']}": answer for workload, c, answer in found
                if answer["error"] is not None or answer["unknown_env"] or not answer["enable_lora"]}
    assert problems == {}


@pytest.mark.parametrize("profile", PROFILES)
def test_the_engine_s_clients_in_each_pod_reach_the_port_it_listens_on(parsed, profile):
    for workload, vllm, answer in parsed[profile]:
        ports = {p["name"]: p["containerPort"] for p in vllm.get("ports", [])}
        assert ports.get("vllm") == answer["port"], vllm["ports"]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert vllm[probe]["httpGet"] == {"path": "/health", "port": "vllm"}
        clients = [c for c in containers(workload) if c is not vllm]
        urls = [entry["value"] for c in clients for n, entry in env_of(c).items()
                if n in ("LORAPLANE_ENGINE_URL", "LORAPLANE_AGENT_VLLM_URL")]
        args = [a for c in clients for a in c.get("args", [])]
        if "--vllm-url" in args:
            urls.append(args[args.index("--vllm-url") + 1])
        assert urls, f"nothing in {workload['metadata']['name']} is told where its vLLM is"
        for url in urls:
            address = urlsplit(url)
            assert address.port == answer["port"], (url, answer["port"])
            assert address.hostname in ("127.0.0.1", "localhost") or answer["host"] in ("0.0.0.0", "::", None), url
