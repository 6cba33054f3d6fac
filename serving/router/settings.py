"""Router settings, from `LORAPLANE_ROUTER_*` variables. Its token (role router, one pool) comes
from the environment, never from the command line, where `ps` would show it."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal

from pydantic import AnyHttpUrl, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from serving.transport import check_registry_transport, is_loopback

MiB = 1024**2
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
_DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
_SERVICE = re.compile(rf"^({_DNS_LABEL})/({_DNS_LABEL})$")


class RouterSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LORAPLANE_ROUTER_", extra="ignore")

    pool: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")
    registry_url: AnyHttpUrl
    token: SecretStr = Field(description="A router token of the pool (loraplane token create "
                                         "--role router --pool POOL).")
    host: str = "127.0.0.1"
    port: int = Field(default=8090, ge=1, le=65535)
    node_ca_file: Path | None = Field(default=None, description=(
        "The CA that signs the nodes' TLS certificates, for node addresses bound as https://: the "
        "router then knows it talks to the node's own engine. Unset: the system's CAs."))
    allow_insecure_registry: bool = Field(default=False, description=(
        "Accept a plain http:// registry on another host, whose traffic (this process's token "
        "included) anyone on the network path can read. Only on a network you trust end to end."))
    metrics_host: str = "127.0.0.1"
    metrics_port: int = Field(default=9401, ge=0, le=65535, description="/metrics; 0 turns it off.")
    key_cache_s: float = Field(default=10, ge=0, le=300, description=(
        "How long a checked app key is trusted before the registry is asked again: also how "
        "long a revoked key keeps working here."))
    max_body_bytes: int = Field(default=1 * MiB, ge=1024, le=64 * MiB)
    max_inflight: int = Field(default=64, ge=1, le=100_000, description=(
        "Requests forwarded at once; more wait in line, interactive ones first."))
    batch_max_inflight: int = Field(default=8, ge=1, le=100_000, description=(
        "Batch-tier requests forwarded at once, so that they cannot fill the nodes' queues "
        "ahead of interactive ones."))
    tenant_max_inflight: int = Field(default=48, ge=1, le=1_000_000, description=(
        "One tenant's requests in the router at once, forwarded or waiting; more get a 429. "
        "Below MAX_INFLIGHT, so that one tenant cannot take every slot."))
    queue_timeout_s: float = Field(default=30, gt=0, le=3600, description=(
        "The longest a request waits for a slot, or for its turn at a node (prompt-logprob "
        "requests go one at a time), before a 503."))
    connect_timeout_s: float = Field(default=2, gt=0, le=60)
    upstream_timeout_s: float = Field(default=300, gt=0, le=3600, description=(
        "The longest a node may take to finish one answer."))
    poll_wait_s: float = Field(default=30, ge=1, le=300, description="Active-set long-poll length.")
    nodes_poll_s: float = Field(default=1, gt=0, le=60, description="How often nodes' reports are read.")
    node_cooldown_s: float = Field(default=5, gt=0, le=600, description=(
        "A node that failed before its first byte gets no requests for this long."))
    spill_outstanding: int = Field(default=8, ge=1, le=10_000, description=(
        "Outstanding requests on the nodes holding an adapter before its traffic also goes to a "
        "node with a free adapter slot."))
    load_wait_s: float = Field(default=2, ge=0, le=60, description=(
        "How long a request for a name that no node reports loaded yet (just promoted) waits "
        "for one before it gets a 503."))
    retry_after_s: int = Field(default=1, ge=1, le=600)
    router_id: str = Field(default="", pattern=r"^$|^[a-z0-9](?:[a-z0-9_-]{0,62}[a-z0-9])?$", description=(
        "This router's name in its traffic reports; default: the router id its token is bound to."))
    traffic_report_s: float = Field(default=10, gt=0, le=3600, description=(
        "How often request rates by served name go to the registry, which sizes each adapter's "
        "replicas by them."))
    node_addresses: Literal["registry", "kubernetes"] = Field(default="registry", description=(
        "Where nodes' vLLM addresses come from: registry (bound by an admin when each node's token "
        "is issued) or kubernetes (the ready endpoints of K8S_SERVICE, by pod name)."))
    k8s_service: str = Field(default="", description=(
        "namespace/name of the pool's headless Service, whose EndpointSlices list its vLLM pods."))
    k8s_port_name: str = Field(default="vllm", description="The name of vLLM's port in those EndpointSlices.")
    k8s_scheme: Literal["http", "https"] = Field(default="http", description=(
        "https when the nodes serve TLS (checked against NODE_CA_FILE)."))
    k8s_api_url: AnyHttpUrl | None = Field(default=None, description=(
        "The Kubernetes API, instead of the pod's own (its service account's token and CA, which "
        "are sent only over https://): a plain http:// one only on this host, such as kubectl proxy."))

    @property
    def service_namespace(self) -> str:
        return self.k8s_service.split("/", 1)[0]

    @property
    def service_name(self) -> str:
        return self.k8s_service.split("/", 1)[1]

    @field_validator("registry_url")
    @classmethod
    def _no_trailing_slash(cls, url: AnyHttpUrl) -> AnyHttpUrl:
        return AnyHttpUrl(str(url).rstrip("/"))

    @field_validator("k8s_service")
    @classmethod
    def _namespace_and_name(cls, service: str) -> str:
        if service and not _SERVICE.match(service):
            raise ValueError(f"{service[:300]!r} is not namespace/name of a Service, such as "
                             "'loraplane/chat-vllm' (lowercase letters, digits and '-')")
        return service

    @field_validator("k8s_port_name")
    @classmethod
    def _port_name(cls, name: str) -> str:
        if not re.fullmatch(_DNS_LABEL, name):
            raise ValueError(f"{name[:100]!r} is not a port name as the pool's Service names vLLM's port, "
                             "such as 'vllm' (lowercase letters, digits and '-')")
        return name

    @model_validator(mode="after")
    def _kubernetes_complete(self) -> RouterSettings:
        if self.node_addresses != "kubernetes":
            return self
        if not self.k8s_service:
            raise ValueError("LORAPLANE_ROUTER_NODE_ADDRESSES=kubernetes needs LORAPLANE_ROUTER_K8S_SERVICE: "
                             "namespace/name of the pool's headless Service")
        url = self.k8s_api_url
        if url is not None and url.scheme == "http" and not is_loopback(url.host):
            raise ValueError(f"LORAPLANE_ROUTER_K8S_API_URL is http:// on {url.host}, another host: anyone "
                             "on the path could say where tenants' prompts go. Use https://, or a "
                             "kubectl proxy on this host")
        if url is None and not in_cluster():
            raise ValueError("LORAPLANE_ROUTER_NODE_ADDRESSES=kubernetes outside a Kubernetes pod (no "
                             f"KUBERNETES_SERVICE_HOST, or no service-account token in {SERVICE_ACCOUNT}): "
                             "set LORAPLANE_ROUTER_K8S_API_URL")
        return self

    @model_validator(mode="after")
    def _batch_within_total(self) -> RouterSettings:
        if self.batch_max_inflight > self.max_inflight:
            raise ValueError(f"LORAPLANE_ROUTER_BATCH_MAX_INFLIGHT ({self.batch_max_inflight}) must "
                             f"not exceed LORAPLANE_ROUTER_MAX_INFLIGHT ({self.max_inflight})")
        return self

    @model_validator(mode="after")
    def _registry_over_a_private_channel(self):
        check_registry_transport(self.registry_url, self.allow_insecure_registry,
                                 "LORAPLANE_ROUTER_ALLOW_INSECURE_REGISTRY")
        return self


def in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST") and os.environ.get("KUBERNETES_SERVICE_PORT")) \
        and (SERVICE_ACCOUNT / "token").is_file()


def in_cluster_url() -> str:
    """The API server as a pod reaches it (the environment Kubernetes gives every pod)."""
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
