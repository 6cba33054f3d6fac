"""Agent settings, from `LORAPLANE_AGENT_*` variables. The node token is read from the
environment (or a .env file), never from the command line, where `ps` would show it; on
Kubernetes, the pod's projected service-account token is read from its file instead."""

from __future__ import annotations

import re
import socket
from pathlib import Path

from pydantic import AnyHttpUrl, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from serving.agent.token_file import pod_name, read_token
from serving.transport import check_registry_transport

GiB = 1024**3
NODE_ID = r"^[a-z0-9](?:[a-z0-9_-]{0,62}[a-z0-9])?$"


def default_node_id() -> str:
    name = re.sub(r"[^a-z0-9_-]", "-", socket.gethostname().lower()).strip("-_")
    return name[:64].strip("-_") or "node"


class AgentSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LORAPLANE_AGENT_", extra="ignore")

    pool: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")
    registry_url: AnyHttpUrl
    vllm_url: AnyHttpUrl = AnyHttpUrl("http://127.0.0.1:8000")
    node_token: SecretStr | None = Field(default=None, description=(
        "A node token of the pool (loraplane token create --role node --pool POOL). Give it or "
        "LORAPLANE_AGENT_TOKEN_FILE, not both."))
    token_file: Path | None = Field(default=None, description=(
        "On Kubernetes: the pod's projected service-account token (audience loraplane), instead of "
        "a node token. It is read again whenever the kubelet renews it, and the node id is the "
        "pod's name in it."))
    # The registry's rule for names: it refuses reports from any other node id.
    node_id: str = Field(default_factory=default_node_id, pattern=NODE_ID)
    state_dir: Path = Field(default=Path.home() / ".loraplane-agent", description=(
        "The adapter cache and the last-known-good active set."))
    cache_max_bytes: int = Field(default=20 * GiB, ge=1024**2, description=(
        "Cached adapters beyond this are evicted, least recently used first, except those vLLM "
        "may still read."))
    poll_wait_s: float = Field(default=30, ge=1, le=300, description="Long-poll length.")
    resync_s: float = Field(default=2, gt=0, le=300, description=(
        "How often vLLM's own list of adapters is compared with the desired set, which is how "
        "a vLLM restart is noticed."))
    heartbeat_s: float = Field(default=20, gt=0, le=3600, description=(
        "A status report at least this often, though nothing changed; keep it well under the "
        "registry's LORAPLANE_NODE_STALE_AFTER_S, after which a silent node counts as stale."))
    retry_failed_after_s: float = Field(default=60, gt=0, description=(
        "A version that failed to load (bad digest, vLLM refused it) is not tried again sooner."))
    request_timeout_s: float = Field(default=30, gt=0, le=600)
    backoff_max_s: float = Field(default=30, gt=0, le=600)
    trust_bundle: Path | None = Field(default=None, description=(
        "An operator-managed trust bundle (the registry's /.well-known/loraplane/trust-bundle.json, "
        "checked out of band): only its keys are trusted, and the file is read again when it "
        "changes. Unset: the first bundle the registry publishes is pinned in state_dir, and a "
        "later one is taken only when a key already pinned signed it."))
    trust_refresh_s: float = Field(default=300, ge=5, le=86400, description=(
        "How often the registry's trust bundle is fetched again (or the operator's file "
        "re-read), besides when an attestation names a key the node does not hold."))
    verify_provenance: bool = Field(default=True, description=(
        "Refuse every version whose attestation does not verify. Turn off only to measure its "
        "cost side by side; the agent warns loudly at start when it is off."))
    engine_dtype: str | None = Field(default=None, pattern=r"^[a-z0-9_]{1,16}$", description=(
        "The dtype this node's vLLM runs with (vLLM does not say), reported with its version."))
    allow_insecure_registry: bool = Field(default=False, description=(
        "Accept a plain http:// registry on another host, whose traffic (this process's token "
        "included) anyone on the network path can read. Only on a network you trust end to end."))
    resolver: bool = Field(default=False, description=(
        "Answer vLLM's loraplane resolver plugin (plugins/vllm-resolver) on a unix socket: a "
        "request for a version of the pool's approved, signed active set that vLLM does not hold "
        "is fetched through the verified cache and loaded on demand. Off: the socket is not opened."))
    resolver_socket: Path | None = Field(default=None, description=(
        "The socket's path, in a folder only this pod's containers share (vLLM's "
        "LORAPLANE_RESOLVER_SOCKET names the same). Default: resolver.sock in state_dir."))
    resolver_deadline_s: float = Field(default=20, gt=0, le=600, description=(
        "The longest the agent works on one answer; a fetch still running then goes on, and the "
        "request gets no adapter (keep it under the plugin's LORAPLANE_RESOLVER_DEADLINE_S)."))
    load_ahead: bool = Field(default=True, description=(
        "Load every version of the active set ahead of its first request. Off (only with the "
        "resolver on): a version is loaded when it is first asked for, and kept loaded while it "
        "stays in the set, for pools whose long tail does not fit resident."))
    metrics_host: str = "127.0.0.1"
    metrics_port: int = Field(default=9400, ge=0, le=65535, description="/metrics and /healthz; 0 turns it off.")

    @field_validator("registry_url", "vllm_url")
    @classmethod
    def _no_trailing_slash(cls, url: AnyHttpUrl) -> AnyHttpUrl:
        return AnyHttpUrl(str(url).rstrip("/"))

    @property
    def cache_dir(self) -> Path:
        return self.state_dir / "cache"

    @property
    def pinned_trust_bundle(self) -> Path:
        return self.state_dir / "trust-bundle.json"

    @property
    def resolver_socket_path(self) -> Path:
        return self.resolver_socket or self.state_dir / "resolver.sock"

    @model_validator(mode="after")
    def _resolver_as_configured(self):
        if not self.load_ahead and not self.resolver:
            raise ValueError("LORAPLANE_AGENT_LOAD_AHEAD=off loads versions only when vLLM's resolver "
                             "asks for them: turn LORAPLANE_AGENT_RESOLVER on as well, or load ahead")
        if self.resolver and len(bytes(self.resolver_socket_path)) > 107:
            raise ValueError(f"the resolver socket's path {str(self.resolver_socket_path)[:200]!r} is longer "
                             "than a unix socket's 107 bytes: set LORAPLANE_AGENT_RESOLVER_SOCKET to a "
                             "shorter one")
        return self

    @model_validator(mode="after")
    def _one_credential(self):
        if self.node_token is not None and not self.node_token.get_secret_value().strip():
            self.node_token = None  # an empty variable (compose's ${LORAPLANE_NODE_TOKEN:-}) gives none
        if (self.node_token is None) == (self.token_file is None):
            raise ValueError("give exactly one of LORAPLANE_AGENT_NODE_TOKEN (a node token) and "
                             "LORAPLANE_AGENT_TOKEN_FILE (the pod's projected service-account "
                             "token on Kubernetes); " + ("both are set" if self.node_token else "neither is set"))
        if self.token_file is not None:
            self.node_id = self._pod_name("node_id" in self.model_fields_set)
        return self

    def _pod_name(self, node_id_given: bool) -> str:
        """This node's id from its token: the pod's name, which the registry takes too."""
        pod = pod_name(read_token(self.token_file)) if self.token_file else ""
        if node_id_given and self.node_id != pod:
            raise ValueError(f"LORAPLANE_AGENT_NODE_ID (or --node-id) is {self.node_id!r}, but the "
                             f"pod's token (LORAPLANE_AGENT_TOKEN_FILE) names pod {pod!r}, whose name "
                             "is the node id the registry takes: unset the node id, or make them agree")
        if not re.fullmatch(NODE_ID, pod):
            raise ValueError(f"the pod's name {pod[:253]!r} (from LORAPLANE_AGENT_TOKEN_FILE) is not a "
                             "node id: 1-64 lowercase letters, digits, '-' and '_', starting and ending "
                             "with a letter or digit; name the pool's pods so that their names fit")
        return pod

    @model_validator(mode="after")
    def _registry_over_a_private_channel(self):
        check_registry_transport(self.registry_url, self.allow_insecure_registry,
                                 "LORAPLANE_AGENT_ALLOW_INSECURE_REGISTRY")
        return self
