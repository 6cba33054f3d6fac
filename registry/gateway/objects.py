"""The inference gateway's objects for one pool, built from its active set: what a cluster's
Gateway API Inference Extension (GIE) or llm-d router needs to route to the pool as loraplane's
router would. Plain dicts, as applied and as `loraplane k8s render` prints them.

Where each schema comes from (the fields only; nothing here is those projects' code):
- InferencePool, inference.networking.k8s.io/v1: kubernetes-sigs/gateway-api-inference-extension,
  api/v1/inferencepool_types.go and api/v1/shared_types.go (spec.selector.matchLabels,
  spec.targetPorts[].number, spec.endpointPickerRef {group, kind, name, port.number, failureMode}),
  and its reference at gateway-api-inference-extension.sigs.k8s.io/reference/spec.
- InferenceModelRewrite and InferenceObjective, llm-d.ai/v1alpha2 by default (the group/version is
  LORAPLANE_GATEWAY_LLMD_API_VERSION: they lived in inference.networking.x-k8s.io/v1alpha2 until
  llm-d took them over in 2026): llm-d/llm-d-router apix/v1alpha2/inferenceobjective_types.go and
  shared_types.go (spec.priority, spec.poolRef {group, kind, name}; poolRef's group defaults to
  llm-d.ai, so it is always given), the rewrite's inferencemodelrewrite_types.go (spec.poolRef,
  spec.rules[].matches[].model {type: Exact, value}, spec.rules[].targets[] {modelRewrite,
  weight 1..1000000}), and the API reference at llm-d.ai/docs/api-reference.

A client's model name means here what it means to loraplane's router (serving/router/catalog.py):
`tenant/name` splits between production and canary by the canary's weight, `tenant/name:alias` is
that alias alone, and `tenant/name@N` is the served name itself, which vLLM knows without a
rewrite."""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from registry.errors import Unprocessable
from registry.gateway_settings import LABEL_VALUE, EndpointPicker

INFERENCE_POOL_GROUP, INFERENCE_POOL_VERSION = "inference.networking.k8s.io", "v1"
INFERENCE_POOL, MODEL_REWRITE, OBJECTIVE = "InferencePool", "InferenceModelRewrite", "InferenceObjective"
MANAGED_BY = "app.kubernetes.io/managed-by"
REGISTRY_LABEL = "loraplane.dev/registry"
POOL_ANNOTATION, MODEL_ANNOTATION = "loraplane.dev/pool", "loraplane.dev/model"
FIELD_MANAGER = "loraplane"
# The router's SLO tiers (serving/router/app_keys.py) as the endpoint picker's priorities. A request
# that names no objective runs at 0, between the two: batch never goes ahead of it.
TIER_PRIORITIES = {"interactive": 10, "batch": -10}
MAX_NAME = 63  # a DNS label: some gateways make a Service of an InferencePool's name
_NOT_IN_NAMES = re.compile(r"[^a-z0-9-]+")


@dataclass(frozen=True)
class GatewaySpec:
    """What the objects take from the settings (LORAPLANE_GATEWAY_*)."""
    namespace: str = "default"
    instance: str = "loraplane"
    llmd_api_version: str = "llm-d.ai/v1alpha2"
    target_port: int = 8000
    pod_labels: dict[str, str] = field(default_factory=dict)
    endpoint_picker: EndpointPicker = field(default_factory=EndpointPicker)

    @classmethod
    def from_settings(cls, settings: Any) -> GatewaySpec:
        return cls(namespace=settings.gateway_namespace, instance=settings.gateway_instance,
                   llmd_api_version=settings.gateway_llmd_api_version,
                   target_port=settings.gateway_target_port, pod_labels=dict(settings.gateway_pod_labels),
                   endpoint_picker=settings.gateway_endpoint_picker)

    @property
    def owned(self) -> dict[str, str]:
        """The labels every object carries, and the only objects the reconciler deletes."""
        return {MANAGED_BY: FIELD_MANAGER, REGISTRY_LABEL: self.instance}


@dataclass(frozen=True)
class Target:
    served_name: str  # tenant/name@N
    weight: int


def model_targets(entries: Iterable[dict[str, Any]]) -> dict[str, list[Target]]:
    """Client-facing model name -> the served names it goes to, with their weights, from the
    active set's entries (served_name, tenant, adapter, aliases [{alias, weight}])."""
    targets: dict[str, list[Target]] = defaultdict(list)
    for entry in entries:
        adapter = f"{entry['tenant']}/{entry['adapter']}"
        for alias in entry["aliases"]:
            targets[f"{adapter}:{alias['alias']}"].append(Target(entry["served_name"], 100))
            if alias["weight"] > 0:  # production and canary share the bare name
                targets[adapter].append(Target(entry["served_name"], alias["weight"]))
    return {model: sorted(found, key=lambda t: t.served_name) for model, found in sorted(targets.items())}


def pool_objects(spec: GatewaySpec, pool: str, entries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pool's InferencePool, an InferenceObjective per SLO tier, and an InferenceModelRewrite
    per client-facing model name, in that order."""
    pool_name = object_name(spec.instance, pool)
    pool_ref = {"group": INFERENCE_POOL_GROUP, "kind": INFERENCE_POOL, "name": pool_name}
    found = [_inference_pool(spec, pool, pool_name)]
    for tier, priority in TIER_PRIORITIES.items():
        found.append(_object(spec, spec.llmd_api_version, OBJECTIVE, object_name(spec.instance, pool, tier), pool,
                             {"priority": priority, "poolRef": dict(pool_ref)}))
    for model, targets in model_targets(entries).items():
        rewrite = _object(spec, spec.llmd_api_version, MODEL_REWRITE, rewrite_name(spec.instance, pool, model), pool, {
            "poolRef": dict(pool_ref),
            "rules": [{"matches": [{"model": {"type": "Exact", "value": model}}],
                       "targets": [{"modelRewrite": t.served_name, "weight": t.weight} for t in targets]}]})
        rewrite["metadata"]["annotations"][MODEL_ANNOTATION] = model
        found.append(rewrite)
    return found


def _inference_pool(spec: GatewaySpec, pool: str, name: str) -> dict[str, Any]:
    picker = spec.endpoint_picker
    values = {"pool": pool, "inference_pool": name}
    selector = {key: value.format(**values) for key, value in spec.pod_labels.items()}
    for key, value in selector.items():
        if not LABEL_VALUE.fullmatch(value):
            raise Unprocessable(f"pool {pool!r} makes the pod label {key}={value!r}, which is not a label "
                                "value (at most 63 letters, digits, '-', '_' and '.')", code="gateway_label",
                                hint="Shorten the pool's name, or LORAPLANE_GATEWAY_POD_LABELS.")
    return _object(spec, f"{INFERENCE_POOL_GROUP}/{INFERENCE_POOL_VERSION}", INFERENCE_POOL, name, pool, {
        "selector": {"matchLabels": selector},
        "targetPorts": [{"number": spec.target_port}],
        "endpointPickerRef": {"group": picker.group, "kind": picker.kind, "name": picker.name.format(**values),
                              "port": {"number": picker.port}, "failureMode": picker.failure_mode}})


def _object(spec: GatewaySpec, api_version: str, kind: str, name: str, pool: str,
            body: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": spec.namespace, "labels": dict(spec.owned),
                         "annotations": {POOL_ANNOTATION: pool}},
            "spec": body}


def object_name(*parts: str) -> str:
    """parts joined by '-', as a DNS label. A pool name may hold '_' and be 64 characters long:
    then the name ends with a digest of the parts, so two pools never share one."""
    raw = "-".join(parts)
    name = _NOT_IN_NAMES.sub("-", raw).strip("-")
    if name == raw and len(name) <= MAX_NAME:
        return name
    return _hashed(name, raw)


def rewrite_name(instance: str, pool: str, model: str) -> str:
    """Always with a digest of the exact model name: `a/b:c` and `a/b-c` read alike once '/' and
    ':' become '-'."""
    readable = _NOT_IN_NAMES.sub("-", f"{instance}-{pool}-{model}".replace("_", "-")).strip("-")
    return _hashed(readable, f"{pool}\n{model}")


def _hashed(readable: str, exact: str) -> str:
    digest = hashlib.sha256(exact.encode()).hexdigest()[:10]
    return f"{readable[:MAX_NAME - len(digest) - 1].rstrip('-')}-{digest}"
