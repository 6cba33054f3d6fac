"""The chart under deploy/helm/loraplane rendered by the real Helm engine (helm-python-sdk, Helm
v4 as a library), offline, into Kubernetes objects the tests read."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import yaml
from helm_python import _native

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "loraplane"
RELEASE, NAMESPACE = "lp", "llm"
SERVICE_MONITOR_API = "monitoring.coreos.com/v1/ServiceMonitor"
# Native sidecars are on by default from 1.29; the newest is the newest kubernetes-validate ships.
OLDEST_KUBERNETES, NEWEST_KUBERNETES = "1.29.0", "1.37.0"


def example(name: str) -> dict[str, Any]:
    return yaml.safe_load((CHART / "examples" / f"{name}.yaml").read_text())


# The profiles the tests render, each as the values given to `helm install -f`.
PROFILES: dict[str, dict[str, Any]] = {
    "default": {},
    "cpu-laptop": example("cpu-laptop"),
    "gpu-8b": example("gpu-8b"),
    "two-pools": {"pools": [
        {"name": "chat", "replicas": 3, "maxLoras": 4, "maxCpuLoras": 16, "maxLoraRank": 32,
         "dtype": "bfloat16", "gpus": 1},
        {"name": "code", "replicas": 2, "maxLoras": 8, "maxCpuLoras": 32, "maxLoraRank": 64,
         "dtype": "bfloat16", "gpus": 2, "onDemand": True, "resolverDeadlineSeconds": 45},
    ]},
    "router-disabled": {"router": {"enabled": False}},
    "service-monitor": {"serviceMonitor": {"enabled": True, "tokenSecret": {"name": "loraplane-metrics"}}},
    "gateway-keyring-sso": {
        "gateway": {"enabled": True, "reconcile": True,
                    "from": [{"namespaceSelector": {"matchLabels": {"name": "gateway"}}}]},
        "attestation": {"keyring": "acme_kms.keyring:make", "keyringEnvSecret": "loraplane-kms"},
        "sso": {"issuer": "https://acme.okta.com", "clientId": "loraplane", "existingSecret": "loraplane-sso"},
        "registry": {"autoscaling": {"enabled": False}, "replicas": 3,
                     "kubernetesAuth": {"jwksConfigMap": "", "jwksUrl": "https://oidc.example.com/keys"}},
        "networkPolicy": {"metricsFrom": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]},
    },
}


def render(values: dict[str, Any] | None = None, *, api_versions: tuple[str, ...] = (),
           kube_version: str | None = None, namespace: str = NAMESPACE) -> dict[str, str]:
    """Template path -> manifest, as `helm template` writes them. The Python API's render takes no
    API versions or Kubernetes version; the library's render options do (`--api-versions`,
    `--kube-version`), so they are passed to it directly."""
    options: dict[str, Any] = {"name": RELEASE, "namespace": namespace, "is_install": True}
    if api_versions:
        options["api_versions"] = list(api_versions)
    if kube_version:
        options["kube_version"] = kube_version
    with helm_python.Chart.load(CHART) as chart:
        rendered = _native.call_string("helm_render", chart._raw(), json.dumps(values or {}),
                                       json.dumps(options))
    return json.loads(rendered)


def objects(values: dict[str, Any] | None = None, **options: Any) -> list[dict[str, Any]]:
    found = []
    for manifest in render(values, **options).values():
        found.extend(item for item in yaml.safe_load_all(manifest) if item)
    return found


def by_kind(items: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {item["metadata"]["name"]: item for item in items if item["kind"] == kind}


def one(items: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = by_kind(items, kind)
    assert name in found, f"no {kind} {name}; there are {sorted(found)}"
    return found[name]


def name(component: str) -> str:
    return f"{RELEASE}-loraplane-{component}"


def pod_spec(item: dict[str, Any]) -> dict[str, Any]:
    return item["spec"]["template"]["spec"]


def containers(item: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every container of a workload's pod, init containers (sidecars) included."""
    spec = pod_spec(item)
    yield from spec.get("initContainers", [])
    yield from spec["containers"]


def container(item: dict[str, Any], container_name: str) -> dict[str, Any]:
    found = {c["name"]: c for c in containers(item)}
    assert container_name in found, f"{item['metadata']['name']} has no container {container_name}"
    return found[container_name]


def env_of(item: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A container's env, name -> its entry (with value or valueFrom)."""
    return {entry["name"]: entry for entry in item.get("env", [])}


def workloads(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [item for item in items if item["kind"] in ("Deployment", "StatefulSet", "Job")]
