"""The LORAPLANE_GATEWAY_* settings (registry/settings.py): how loraplane names, labels and points
the inference gateway's objects it keeps in step (registry/gateway, workers/gateway_sync.py),
checked as the process starts so that a bad one names itself at once, not at the first apply."""

from __future__ import annotations

import re
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

DNS_LABEL = re.compile(r"^[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?$")
# A label key (a qualified name) and value, as Kubernetes validates them.
LABEL_KEY = re.compile(r"^(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?"
                       r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
GROUP_VERSION = re.compile(r"^[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)+"
                           r"/v[0-9]+(?:(?:alpha|beta)[0-9]+)?$")
# What a template may name: the pool as the registry names it, and the InferencePool's name.
PLACEHOLDERS = {"pool": "pool-a", "inference_pool": "loraplane-pool-a"}


class EndpointPicker(BaseModel):
    """LORAPLANE_GATEWAY_ENDPOINT_PICKER: each InferencePool's endpointPickerRef, the endpoint
    picker (EPP) that scores its pods. `name` may hold {pool} and {inference_pool}."""
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    name: str = Field(default="{inference_pool}-epp", min_length=1, max_length=253)
    port: int = Field(default=9002, ge=1, le=65535)
    kind: str = Field(default="Service", pattern=r"^[a-zA-Z](?:[-a-zA-Z0-9]{0,61}[a-zA-Z0-9])?$")
    group: str = Field(default="", max_length=253,
                       pattern=r"^$|^[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*$")
    failure_mode: Literal["FailOpen", "FailClose"] = Field(default="FailClose", alias="failureMode")


DEFAULT_POD_LABELS = {"app.kubernetes.io/component": "pool-{pool}", "loraplane.dev/pool": "{pool}"}


def check_gateway(settings: Any) -> None:
    """The LORAPLANE_GATEWAY_* settings of a RegistrySettings, together."""
    if not DNS_LABEL.fullmatch(settings.gateway_namespace):
        raise ValueError(f"LORAPLANE_GATEWAY_NAMESPACE {settings.gateway_namespace!r} is not a "
                         "namespace's name (a lowercase DNS label)")
    if not DNS_LABEL.fullmatch(settings.gateway_instance) or len(settings.gateway_instance) > 52:
        raise ValueError(f"LORAPLANE_GATEWAY_INSTANCE {settings.gateway_instance!r} must be a lowercase "
                         "DNS label of at most 52 characters: it starts every object's name and is "
                         "the value of its loraplane.dev/registry label")
    if not GROUP_VERSION.fullmatch(settings.gateway_llmd_api_version):
        raise ValueError(f"LORAPLANE_GATEWAY_LLMD_API_VERSION {settings.gateway_llmd_api_version!r} is "
                         "not group/version, such as llm-d.ai/v1alpha2")
    _template("LORAPLANE_GATEWAY_ENDPOINT_PICKER name", settings.gateway_endpoint_picker.name)
    labels: dict[str, str] = settings.gateway_pod_labels
    if not labels:
        raise ValueError("LORAPLANE_GATEWAY_POD_LABELS selects every pod of the namespace: give the "
                         'labels of a pool\'s vLLM pods, such as {"loraplane.dev/pool": "{pool}"}')
    for key, value in labels.items():
        if not LABEL_KEY.fullmatch(key) or not isinstance(value, str):
            raise ValueError(f"LORAPLANE_GATEWAY_POD_LABELS: {key!r} is not a label key with a text value")
        if not LABEL_VALUE.fullmatch(_template(f"LORAPLANE_GATEWAY_POD_LABELS[{key}]", value)):
            raise ValueError(f"LORAPLANE_GATEWAY_POD_LABELS[{key}] {value!r} does not make a label value")
    if settings.gateway_api_url is not None:
        _check_api_url(settings.gateway_api_url)


def _template(setting: str, value: str) -> str:
    try:
        return value.format(**PLACEHOLDERS)
    except (KeyError, IndexError, ValueError) as error:
        raise ValueError(f"{setting} {value!r} may name only {{pool}} and {{inference_pool}} "
                         f"({type(error).__name__}: {error})") from None


def _check_api_url(url: str) -> None:
    parts = urlsplit(url)
    loopback = parts.hostname in ("localhost", "127.0.0.1", "::1")
    if parts.scheme != "https" and not (parts.scheme == "http" and loopback):
        raise ValueError("LORAPLANE_GATEWAY_API_URL must be an https URL (http only on a loopback "
                         f"address, such as `kubectl proxy`'s); got {url!r}")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError("LORAPLANE_GATEWAY_API_URL must name the API server only: no credentials, "
                         "query or fragment")
