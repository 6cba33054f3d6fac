"""JSON schemas of the three kinds loraplane emits, written from their CRDs' documented fields and
validation markers (required fields, types, enums, bounds, patterns), so that every object the
suite sees is checked as the API server would check it. Unknown fields are refused here (a CRD
would prune them silently, hiding a misspelt field).

Sources (fields only):
- InferencePool, inference.networking.k8s.io/v1: kubernetes-sigs/gateway-api-inference-extension
  api/v1/inferencepool_types.go and api/v1/shared_types.go; the reference at
  gateway-api-inference-extension.sigs.k8s.io/reference/spec (targetPorts: 1 to 8 ports, unique
  numbers; appProtocol http or kubernetes.io/h2c).
- InferenceObjective, llm-d.ai/v1alpha2: llm-d/llm-d-router apix/v1alpha2/inferenceobjective_types.go
  and shared_types.go; llm-d.ai/docs/api-reference/inferenceobjective (poolRef required there).
- InferenceModelRewrite, llm-d.ai/v1alpha2: the v1alpha2 inferencemodelrewrite_types.go (GIE's
  apix, taken over by llm-d) and llm-d.ai/docs/api-reference/inferencemodelrewrite."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator

DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
LABEL_KEY = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
             r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$")
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"

GROUP = {"type": "string", "maxLength": 253, "pattern": r"^$|" + DNS_SUBDOMAIN}
KIND = {"type": "string", "minLength": 1, "maxLength": 63, "pattern": r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$"}
OBJECT_NAME = {"type": "string", "minLength": 1, "maxLength": 253}
PORT = {"type": "object", "required": ["number"], "additionalProperties": False,
        "properties": {"number": {"type": "integer", "minimum": 1, "maximum": 65535}}}
LABELS = {"type": "object", "propertyNames": {"pattern": LABEL_KEY, "maxLength": 253},
          "additionalProperties": {"type": "string", "maxLength": 63, "pattern": LABEL_VALUE}}
METADATA = {"type": "object", "required": ["name"], "properties": {
    "name": {"type": "string", "maxLength": 253, "pattern": DNS_SUBDOMAIN},
    "namespace": {"type": "string", "maxLength": 63, "pattern": DNS_LABEL},
    "labels": LABELS,
    "annotations": {"type": "object", "additionalProperties": {"type": "string"}}}}
POOL_REF = {"type": "object", "required": ["name"], "additionalProperties": False,
            "properties": {"group": GROUP, "kind": KIND, "name": OBJECT_NAME}}


def _kind(api_version: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
            "required": ["apiVersion", "kind", "metadata", "spec"],
            "properties": {"apiVersion": {"const": api_version}, "kind": {"const": kind},
                           "metadata": METADATA, "spec": spec}}


INFERENCE_POOL = _kind("inference.networking.k8s.io/v1", "InferencePool", {
    "type": "object", "required": ["selector", "targetPorts", "endpointPickerRef"], "additionalProperties": False,
    "properties": {
        "selector": {"type": "object", "required": ["matchLabels"], "additionalProperties": False,
                     "properties": {"matchLabels": {**LABELS, "maxProperties": 64}}},
        "targetPorts": {"type": "array", "minItems": 1, "maxItems": 8, "uniqueItems": True, "items": PORT},
        "appProtocol": {"enum": ["http", "kubernetes.io/h2c"]},
        "endpointPickerRef": {
            "type": "object", "required": ["name"], "additionalProperties": False,
            "properties": {"group": GROUP, "kind": KIND, "name": OBJECT_NAME, "port": PORT,
                           "failureMode": {"enum": ["FailOpen", "FailClose"]}},
            # CEL: self.kind != 'Service' || has(self.port), and kind defaults to Service.
            "anyOf": [{"required": ["port"]},
                      {"required": ["kind"], "properties": {"kind": {"not": {"const": "Service"}}}}]}}})


def inference_objective(api_version: str = "llm-d.ai/v1alpha2") -> dict[str, Any]:
    return _kind(api_version, "InferenceObjective", {
        "type": "object", "required": ["poolRef"], "additionalProperties": False,
        "properties": {"priority": {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1},
                       "poolRef": POOL_REF,
                       "poolRefs": {"type": "array", "minItems": 1, "items": POOL_REF},
                       "poolSelector": {"type": "object"}}})


TARGET = {"type": "object", "required": ["modelRewrite"], "additionalProperties": False,
          "properties": {"modelRewrite": {"type": "string", "minLength": 1},
                         "weight": {"type": "integer", "minimum": 1, "maximum": 1_000_000}}}


def inference_model_rewrite(api_version: str = "llm-d.ai/v1alpha2") -> dict[str, Any]:
    match = {"type": "object", "required": ["model"], "additionalProperties": False, "properties": {
        "model": {"type": "object", "required": ["value"], "additionalProperties": False,
                  "properties": {"type": {"enum": ["Exact"]}, "value": {"type": "string", "minLength": 1}}}}}
    rule = {"type": "object", "additionalProperties": False, "properties": {
        "matches": {"type": "array", "items": match},
        # A weight on one target means a weight on every target.
        "targets": {"type": "array", "minItems": 1, "items": TARGET,
                    "anyOf": [{"items": {"required": ["weight"]}}, {"items": {"not": {"required": ["weight"]}}}]}}}
    return _kind(api_version, "InferenceModelRewrite", {
        "type": "object", "required": ["poolRef", "rules"], "additionalProperties": False,
        "properties": {"poolRef": POOL_REF, "rules": {"type": "array", "items": rule}}})


def validator(item: dict[str, Any], llmd_api_version: str = "llm-d.ai/v1alpha2") -> Draft202012Validator:
    schema = {"InferencePool": INFERENCE_POOL, "InferenceObjective": inference_objective(llmd_api_version),
              "InferenceModelRewrite": inference_model_rewrite(llmd_api_version)}[item["kind"]]
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def problems(item: dict[str, Any], llmd_api_version: str = "llm-d.ai/v1alpha2") -> list[str]:
    """What the kind's schema refuses in the object, each with where."""
    return [f"{item['kind']} {item['metadata'].get('name')} at /{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator(item, llmd_api_version).iter_errors(item)]
