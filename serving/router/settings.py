"""Router settings, from `LORAPLANE_ROUTER_*` variables. Its token (role router, one pool) comes
from the environment, never from the command line, where `ps` would show it."""

from __future__ import annotations

from pathlib import Path

from pydantic import AnyHttpUrl, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from serving.transport import check_registry_transport

MiB = 1024**2


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

    @field_validator("registry_url")
    @classmethod
    def _no_trailing_slash(cls, url: AnyHttpUrl) -> AnyHttpUrl:
        return AnyHttpUrl(str(url).rstrip("/"))

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
