"""Registry settings: one pydantic-settings class, read from `LORAPLANE_*` variables."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import (BaseModel, ConfigDict, Field, IPvAnyNetwork, SecretStr, field_validator,
                      model_validator)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from registry.gateway_settings import DEFAULT_POD_LABELS, EndpointPicker, check_gateway
from registry.k8s_settings import check_k8s, service_accounts_setting

MiB = 1024 * 1024
MAX_PRESIGN_TTL_S = 7 * 24 * 3600  # a download link never lives longer, whatever it says


class SsoRoleMapping(BaseModel):
    """One rule of LORAPLANE_SSO_ROLE_MAPPINGS."""
    model_config = ConfigDict(extra="forbid")
    claim: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_:/.-]+$")
    value: str = Field(min_length=1, max_length=256)
    role: Literal["admin", "reviewer", "uploader"]
    tenant: str | None = Field(default=None, max_length=64)

    @model_validator(mode="after")
    def _global_only_for_admins(self) -> SsoRoleMapping:
        if self.tenant is None and self.role != "admin":
            raise ValueError(f"the mapping of {self.claim}={self.value!r} to {self.role} names no "
                             "tenant: only an admin may be global (tenant null)")
        return self


class RegistrySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LORAPLANE_", extra="ignore")

    data_dir: Path = Field(default=Path.home() / ".loraplane", description="Embedded-default state.")
    database_url: str = Field(default="", description="Empty means SQLite inside data_dir.")
    # Connections (docs/operations.md, "Database connections"): each process holds up to
    # pool_size + max_overflow; `serve --workers N` runs N processes; each registry process also
    # holds one LISTEN connection, and each housekeeper one leadership connection.
    database_pool_size: int = Field(default=10, ge=1, le=1000, description=(
        "Connections each process keeps open to the database (SQLAlchemy's pool_size)."))
    database_max_overflow: int = Field(default=20, ge=0, le=1000, description=(
        "Connections a process may open past LORAPLANE_DATABASE_POOL_SIZE under load, closed "
        "again when returned (SQLAlchemy's max_overflow)."))
    database_pgbouncer: bool = Field(default=False, description=(
        "LORAPLANE_DATABASE_URL goes through PgBouncer in transaction-pooling mode: no "
        "server-side prepared statements, and LISTEN only over LORAPLANE_DATABASE_LISTEN_URL."))
    database_listen_url: str | None = Field(default=None, min_length=1, max_length=2000, description=(
        "A direct PostgreSQL URL (not through PgBouncer), used only for LISTEN: a commit on any "
        "registry wakes this one's long-polls at once. Unset: LORAPLANE_DATABASE_URL, unless it "
        "goes through PgBouncer (LORAPLANE_DATABASE_PGBOUNCER), where LISTEN cannot work; then "
        "long-polls wake at the next re-read (LORAPLANE_ACTIVE_SET_POLL_S)."))
    leadership_check_s: float = Field(default=2.0, ge=0.1, le=60, description=(
        "How often a housekeeper that does not lead tries to take the lead, and the leader checks "
        "its leadership connection: a killed leader is replaced within about this long."))

    storage: Literal["local", "s3"] = "local"
    s3_bucket: str = "loraplane-artifacts"
    s3_endpoint_url: str | None = None
    s3_region: str = "us-east-1"
    s3_presign_endpoint_url: str | None = Field(default=None, max_length=500, description=(
        "Where nodes and clients fetch artifacts from, when it is not where the registry reaches "
        "S3 (LORAPLANE_S3_ENDPOINT_URL): the download URLs handed out are signed for this "
        "address, e.g. https://s3.internal.example.com. Unset: the endpoint the registry uses."))
    s3_addressing_style: Literal["path", "virtual", "auto"] = Field(default="path", description=(
        "path: https://host/bucket/key; virtual: https://bucket.host/key, as AWS prefers and "
        "some S3-compatible servers require; auto: botocore picks."))
    s3_sse: Literal["none", "AES256", "aws:kms"] = Field(default="none", description=(
        "Server-side encryption asked for on every object written (multipart uploads included): "
        "none (the bucket's default applies), AES256 (S3-managed keys) or aws:kms."))
    s3_sse_kms_key_id: str | None = Field(default=None, min_length=1, max_length=2048, description=(
        "With LORAPLANE_S3_SSE=aws:kms: the KMS key (id, ARN or alias ARN) to encrypt with. "
        "Unset: the account's aws/s3 key."))

    public_url: str = "http://127.0.0.1:8000"
    secret_key: SecretStr | None = Field(
        default=None, min_length=32,
        description=(
            "The deployment's secret: every HMAC key (audit chain, token hashes, sessions, "
            "download links, seals) is derived from it. Generated into data_dir if unset."),
    )
    previous_secret_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list, description=(
            "Secrets this one replaced, newest first, comma-separated: what they keyed still "
            "verifies (audit events, tokens, sessions, seals) while everything new is keyed with "
            "LORAPLANE_SECRET_KEY. Keep one here as long as the audit events it keyed must verify."))
    attestation_key_dir: Path | None = Field(default=None, description=(
        "Where the attestation signing keys live (Ed25519, one PEM per key, rotated through the "
        "API). Empty means data_dir/attestation-keys, generated on first use."))
    attestation_private_key: SecretStr | None = Field(default=None, description=(
        "One Ed25519 private key (PEM) to sign attestations with, instead of the key folder. "
        "Rotate it by deploying a new one, with this one in "
        "LORAPLANE_ATTESTATION_PREVIOUS_PRIVATE_KEYS; the API cannot."))
    attestation_previous_private_keys: SecretStr | None = Field(default=None, max_length=64 * 1024, description=(
        "The Ed25519 keys (PEM blocks, newest first) LORAPLANE_ATTESTATION_PRIVATE_KEY replaced. "
        "Each stays trusted for LORAPLANE_ATTESTATION_KEY_OVERLAP_S after the registry first "
        "starts without it, and signs the trust bundle meanwhile, so nodes follow the rotation."))
    attestation_keyring: str | None = Field(default=None, pattern=r"^[\w.]+:[\w]+$", description=(
        "module:factory of a keyring plug-in (a KMS, say) instead of either; see "
        "registry/attestation_keys/keyring.py for the interface."))
    attestation_key_overlap_s: int = Field(default=7 * 86400, ge=1, le=365 * 86400, description=(
        "How long a rotated-out key stays trusted, so attestations it signed keep verifying "
        "while nodes move to the re-signed ones."))
    attestation_min_overlap_s: int = Field(default=3600, ge=1, le=365 * 86400, description=(
        "The shortest overlap a rotation may be given."))
    presign_ttl_s: int = Field(default=900, ge=30, le=MAX_PRESIGN_TTL_S)
    token_ttl_days: int = Field(default=90, ge=1, le=3650, description=(
        "Lifetime of a new API token unless its creator asks for another."))
    token_max_ttl_days: int = Field(default=365, ge=1, le=3650, description=(
        "The longest lifetime a token may be given."))

    max_upload_bytes: int = Field(default=1024 * MiB, ge=1024)
    max_archive_files: int = Field(default=64, ge=2, le=10_000)
    max_header_bytes: int = Field(default=16 * MiB, ge=1024)
    max_config_bytes: int = Field(default=1 * MiB, ge=1024)
    max_concurrent_uploads: int = Field(default=4, ge=1, le=1024, description=(
        "Uploads one registry process receives at once; each may spool and expand up to "
        "max_upload_bytes. More are answered 429 with Retry-After."))
    max_concurrent_uploads_per_tenant: int = Field(default=3, ge=1, le=1024, description=(
        "One tenant's share of those, so that one tenant never holds every slot."))

    upload_idle_timeout_s: float = Field(default=30.0, gt=0, le=3600, description=(
        "Longest wait for the next bytes of an upload body, and the grace period before the "
        "minimum rate applies. Past it the upload is answered 408 and its slot is freed."))
    upload_min_bytes_per_s: int = Field(default=32 * 1024, ge=0, le=1024**3, description=(
        "Average rate an upload body must keep once the grace period is over (0: no minimum). "
        "At 32 KiB/s a 1 GiB upload may take about 9 hours."))

    broker_url: str = Field(default="", description=(
        "Celery broker, e.g. redis://host:6379/0. Empty means a folder queue inside data_dir "
        "that needs no server (one machine only)."))
    result_backend: str = Field(default="", description=(
        "Celery results. Empty means the broker's Redis, or SQLite inside data_dir."))
    broker_visibility_timeout_s: int = Field(default=3600, ge=5, le=7 * 24 * 3600, description=(
        "Redis broker: an unacknowledged task is delivered again after this long, e.g. when "
        "its worker was killed."))

    retire_grace_s: float = Field(default=30.0, ge=0, le=86400, description=(
        "A version that lost its last alias stays in the active set this long after every live "
        "node applied the change, so requests already in flight finish on it."))
    blob_gc_grace_s: float = Field(default=7 * 86400, ge=60, le=365 * 86400, description=(
        "A stored blob that nothing names any more (its versions deleted, or an upload that "
        "failed after storing it) is collected by the housekeeper once it has stayed unnamed, "
        "and unwritten, this long."))
    blob_gc_every_s: float = Field(default=3600, ge=10, le=7 * 86400, description=(
        "How often the housekeeper looks for blobs to collect."))
    node_stale_after_s: float = Field(default=60.0, ge=1, le=86400, description=(
        "A node that has not reported for this long is shown as stale and no longer counted."))
    node_gone_after_s: float = Field(default=3600.0, ge=1, le=30 * 86400, description=(
        "A node silent this long is taken as gone (removed, or a pod replaced under another id): "
        "it leaves the fleet's metrics instead of counting as stale for ever."))
    traffic_stale_after_s: float = Field(default=120.0, ge=1, le=86400, description=(
        "Routers' traffic reports older than this no longer count toward placement."))
    active_set_poll_s: float = Field(default=1.0, ge=0.05, le=60, description=(
        "How often each registry process re-reads pool generations, in case a notification "
        "was missed (Postgres notifies at once; SQLite relies on this)."))
    legacy_token_hashes: Literal["refuse", "upgrade"] = Field(default="refuse", description=(
        "Tokens issued before their hashes were keyed: refuse them (the default), or, during an "
        "upgrade, accept each once and store it keyed. A database writer can add an unkeyed hash: "
        "turn 'upgrade' off again once the fleet's tokens have each been used."))
    auth_cache_s: float = Field(default=5.0, ge=0, le=300, description=(
        "How long the active-set endpoint trusts a checked token. A revocation reaches other "
        "processes at once on Postgres, and within this long otherwise."))
    webhook_max_attempts: int = Field(default=8, ge=1, le=50)
    webhook_backoff_s: float = Field(default=2.0, ge=0.01, le=3600, description=(
        "First retry delay of a failed webhook delivery; it doubles on each attempt."))
    webhook_timeout_s: float = Field(default=10.0, ge=0.5, le=120)
    canary_check_s: float = Field(default=5.0, ge=0.2, le=3600, description=(
        "How often the housekeeper judges every canary under analysis. A bad canary is rolled "
        "back at most this long (plus a router's traffic report interval) after the evidence."))
    tenant_max_waiting_evaluations: int = Field(default=100, ge=1, le=1_000_000, description=(
        "How many of one tenant's evaluations may wait or run at once (re-qualification's are "
        "not counted): an upload or a request past it is refused with 429 until some finish, so "
        "one tenant cannot fill the shared workers' queue."))
    tenant_max_suites: int = Field(default=200, ge=1, le=1_000_000, description=(
        "How many eval suites one tenant may own."))
    canary_grace_s: float = Field(default=15.0, ge=0, le=3600, description=(
        "How long after a canary's step is committed its traffic starts to count. A window a "
        "router reports within it may hold requests routed at the previous weight; keep it above "
        "the routers' traffic report interval (10 s by default) plus their active-set delay."))
    traffic_window_keep_s: float = Field(default=7 * 86400, ge=60, le=366 * 86400, description=(
        "How long the routers' traffic windows are kept for canary analysis."))
    webhook_allowed_networks: list[IPvAnyNetwork] = Field(default_factory=list, description=(
        "Internal networks webhooks may reach anyway, e.g. [\"10.1.0.0/16\"]; by default every "
        "address that is not globally routable is refused (loopback, private, link-local, "
        "100.64.0.0/10, multicast, reserved, and IPv6 forms that embed such an address)."))
    sso_issuer: str | None = Field(default=None, max_length=500, description=(
        "The OpenID Connect issuer people sign in with (e.g. https://acme.okta.com): the "
        "dashboard's 'Sign in with ...' and `loraplane login`. Unset: bearer tokens only. "
        "https, or http on a loopback address."))
    sso_client_id: str = Field(default="", max_length=300, description=(
        "This registry's client id at the identity provider."))
    sso_client_secret: SecretStr | None = Field(default=None, max_length=2000, description=(
        "The client's secret (a confidential web client). Unset: a public client, with PKCE only."))
    sso_provider_name: str = Field(default="your identity provider", max_length=64, description=(
        "What the sign-in button calls the provider."))
    sso_scopes: str = Field(default="openid email profile", max_length=300, pattern=r"^[\x21-\x7e ]+$",
                            description="Scopes asked for; add the one that carries groups if needed.")
    sso_name_claim: str = Field(default="email", max_length=64, description=(
        "The claim shown as a person's name. Only shown: identities are compared by issuer and "
        "subject, never by names."))
    sso_role_mappings: list[SsoRoleMapping] = Field(default_factory=list, max_length=200, description=(
        "Which claims give which role in which tenant, as a JSON list of {claim, value, role, "
        "tenant}; the first that matches wins. A claim is a name or a dotted path "
        "(realm_access.roles); it matches when it equals `value` or is a list holding it. "
        "tenant null (with role admin) is a global admin."))
    sso_required_for_people: bool = Field(default=False, description=(
        "Tenants' people (uploaders, reviewers, tenant admins) act only signed on: a token issued "
        "to one by hand works only once its identity is linked to a sign-on (loraplane "
        "link-identity), so nobody keeps an unlinked second identity to approve their own work "
        "with. Global admins, nodes, routers and apps are not affected."))
    sso_clock_skew_s: int = Field(default=60, ge=0, le=600, description=(
        "How far the provider's clock may be from this one when an ID token's times are checked."))
    sso_sign_in_ttl_s: int = Field(default=600, ge=30, le=3600, description=(
        "How long a started sign-in may take, from the redirect to the provider to its answer."))
    sso_cli_token_ttl_s: int = Field(default=12 * 3600, ge=300, le=30 * 86400, description=(
        "Lifetime of the token `loraplane login` gets."))
    k8s_issuer: str | None = Field(default=None, max_length=500, description=(
        "The Kubernetes cluster's service-account issuer (the tokens' `iss`): node agents may then "
        "authenticate with their pod's projected service-account token (docs/operations.md, "
        "\"Nodes on Kubernetes\"). Unset: such tokens are refused like any unknown token."))
    k8s_jwks_file: Path | None = Field(default=None, description=(
        "The issuer's public keys as a JWKS file (a ConfigMap of `kubectl get --raw "
        "/openid/v1/jwks`), read again when it changes. Unset: LORAPLANE_K8S_JWKS_URL, else OIDC "
        "discovery at the issuer."))
    k8s_jwks_url: str | None = Field(default=None, max_length=500, description=(
        "Where the issuer's JWKS is fetched from (https; http only on loopback). Unset: the "
        "jwks_uri of {issuer}/.well-known/openid-configuration."))
    k8s_audience: str = Field(default="loraplane", min_length=1, max_length=256, description=(
        "The audience the projected tokens are requested for; a token without it is refused."))
    k8s_service_accounts: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict, description=(
        "Which service account's pods are nodes of which pool: a JSON object of "
        "\"namespace/serviceaccount\" to a pool name, e.g. {\"llm/loraplane-pool-a\": \"pool-a\"}."))
    k8s_max_token_lifetime_s: int = Field(default=7200, ge=600, le=86400, description=(
        "Tokens valid longer than this (exp - iat) are refused as not short-lived, such as the "
        "year-long ones a cluster issues for expirationSeconds 3607."))
    gateway_reconcile: bool = Field(default=False, description=(
        "The housekeeper that leads keeps the inference gateway's InferencePool, "
        "InferenceModelRewrite and InferenceObjective objects in step with the pools' active sets "
        "(docs/gateway.md). Off: `loraplane k8s render` still prints them."))
    gateway_namespace: str = Field(default="default", max_length=63, description=(
        "The namespace of the gateway's objects, which is the pools' pods' namespace."))
    gateway_instance: str = Field(default="loraplane", max_length=52, description=(
        "Starts each object's name and is its loraplane.dev/registry label: the reconciler "
        "deletes only objects carrying it (and app.kubernetes.io/managed-by: loraplane)."))
    gateway_api_url: str | None = Field(default=None, max_length=500, description=(
        "The Kubernetes API, out of the cluster (e.g. `kubectl proxy`'s http://127.0.0.1:8001) or "
        "in tests. Unset: the pod's own API server with its service account."))
    gateway_llmd_api_version: str = Field(default="llm-d.ai/v1alpha2", max_length=300, description=(
        "group/version of the llm-d router's InferenceModelRewrite and InferenceObjective; they "
        "moved from inference.networking.x-k8s.io/v1alpha2 to llm-d.ai/v1alpha2 in 2026."))
    gateway_endpoint_picker: EndpointPicker = Field(default_factory=EndpointPicker, description=(
        "Each InferencePool's endpointPickerRef, as JSON: {\"name\": \"{inference_pool}-epp\", "
        "\"port\": 9002, \"kind\": \"Service\", \"group\": \"\", \"failureMode\": \"FailClose\"}; "
        "name may hold {pool} and {inference_pool}."))
    gateway_target_port: int = Field(default=8000, ge=1, le=65535, description=(
        "vLLM's port on the pools' pods (the InferencePool's targetPorts)."))
    gateway_pod_labels: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_POD_LABELS), description=(
        "The labels of a pool's vLLM pods (the InferencePool's selector) as a JSON object; values "
        "may hold {pool}. The Helm chart sets its own."))
    gateway_interval_s: float = Field(default=30.0, ge=1, le=3600, description=(
        "How often the reconciler compares the objects with the active sets. A round that finds "
        "nothing changed lists the three kinds once each and writes nothing."))
    gateway_force_conflicts: bool = Field(default=False, description=(
        "Take fields loraplane declares back from another field manager that applied them too "
        "(a conflict, otherwise reported and left alone). Hand edits are corrected either way."))
    audit_head_file: Path | None = Field(default=None, description=(
        "Where the signed head of the audit chain is kept, outside the database. Unset means a "
        "file per database under data_dir/audit-heads. Put it where the database's owners cannot "
        "write."))

    @field_validator("previous_secret_keys", mode="before")
    @classmethod
    def _split_secrets(cls, value: object) -> object:
        if isinstance(value, str):
            return [part for part in value.replace("\n", ",").split(",") if part.strip()]
        return value

    @field_validator("previous_secret_keys")
    @classmethod
    def _long_enough(cls, value: list[SecretStr]) -> list[SecretStr]:
        for position, secret in enumerate(value, 1):
            if len(secret.get_secret_value().strip()) < 32:
                raise ValueError(f"previous secret {position} is shorter than 32 characters")
        return value

    @field_validator("k8s_service_accounts", mode="before")
    @classmethod
    def _service_accounts(cls, value: object) -> object:
        return service_accounts_setting(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _fill_defaults(self) -> RegistrySettings:
        if not self.database_url:
            self.database_url = f"sqlite:///{self.data_dir / 'loraplane.db'}"
        self._check_database()
        if not self.broker_url:
            self.broker_url = "filesystem://"
        if not self.result_backend:
            self.result_backend = (self.broker_url if self.broker_url.startswith("redis")
                                   else f"db+sqlite:///{self.data_dir / 'task-results.db'}")
        if self.sso_issuer is not None:
            self._check_sso()
        check_k8s(self)
        check_gateway(self)
        if self.storage == "s3" and not self.s3_bucket:
            raise ValueError("LORAPLANE_S3_BUCKET must be set when LORAPLANE_STORAGE=s3")
        self._check_s3()
        return self

    def _check_database(self) -> None:
        postgres = ("postgresql://", "postgresql+")
        if self.database_pgbouncer and not self.database_url.startswith(postgres):
            raise ValueError("LORAPLANE_DATABASE_PGBOUNCER is set, but LORAPLANE_DATABASE_URL is "
                             "not a PostgreSQL URL: PgBouncer pools PostgreSQL connections only")
        if self.database_listen_url is not None and not self.database_listen_url.startswith(postgres):
            raise ValueError("LORAPLANE_DATABASE_LISTEN_URL must be a PostgreSQL URL "
                             "(postgresql+psycopg://user@host:5432/db), straight to the server")

    def _check_s3(self) -> None:
        """Refuse what S3 would refuse later, or what would not do what it says."""
        chosen = [name for name, value in (
            ("LORAPLANE_S3_PRESIGN_ENDPOINT_URL", self.s3_presign_endpoint_url),
            ("LORAPLANE_S3_SSE", self.s3_sse != "none"), ("LORAPLANE_S3_SSE_KMS_KEY_ID", self.s3_sse_kms_key_id),
            ("LORAPLANE_S3_ADDRESSING_STYLE", self.s3_addressing_style != "path")) if value]
        if chosen and self.storage != "s3":
            raise ValueError(f"{', '.join(chosen)} configure S3, but LORAPLANE_STORAGE is "
                             f"{self.storage!r}: set LORAPLANE_STORAGE=s3, or unset them")
        if self.s3_sse_kms_key_id is not None and self.s3_sse != "aws:kms":
            raise ValueError(f"LORAPLANE_S3_SSE_KMS_KEY_ID is set but LORAPLANE_S3_SSE is "
                             f"{self.s3_sse!r}: S3 takes a KMS key only with LORAPLANE_S3_SSE=aws:kms")
        if self.s3_sse_kms_key_id is not None and (self.s3_sse_kms_key_id != self.s3_sse_kms_key_id.strip()
                                                   or not self.s3_sse_kms_key_id.isprintable()):
            raise ValueError("LORAPLANE_S3_SSE_KMS_KEY_ID holds spaces or control characters: give "
                             "the key's id, ARN or alias ARN alone")
        if self.s3_presign_endpoint_url is not None:
            _check_endpoint("LORAPLANE_S3_PRESIGN_ENDPOINT_URL", self.s3_presign_endpoint_url)
        if self.s3_addressing_style == "virtual" and not VIRTUAL_HOST_BUCKET.fullmatch(self.s3_bucket):
            raise ValueError(f"LORAPLANE_S3_ADDRESSING_STYLE=virtual puts the bucket in the host name, "
                             f"and LORAPLANE_S3_BUCKET {self.s3_bucket!r} is not one label of a host "
                             "name (3-63 lowercase letters, digits and '-'; a '.' breaks TLS "
                             "certificates): use path addressing, or another bucket")

    def _check_sso(self) -> None:
        issuer = urlsplit(self.sso_issuer or "")
        loopback = issuer.hostname in ("localhost", "127.0.0.1", "::1")
        if issuer.scheme != "https" and not (issuer.scheme == "http" and loopback):
            raise ValueError("LORAPLANE_SSO_ISSUER must be an https URL (http only on a loopback "
                             "address, for a provider on this machine)")
        if issuer.query or issuer.fragment or not issuer.hostname:
            raise ValueError("LORAPLANE_SSO_ISSUER must be the issuer's URL, with no query or fragment")
        if not self.sso_client_id:
            raise ValueError("LORAPLANE_SSO_CLIENT_ID must be set with LORAPLANE_SSO_ISSUER: the "
                             "client id the identity provider gave this registry")
        if "openid" not in self.sso_scopes.split():
            raise ValueError("LORAPLANE_SSO_SCOPES must include openid")

    @property
    def sso_enabled(self) -> bool:
        return self.sso_issuer is not None

    @property
    def artifacts_dir(self) -> Path:
        return self.data_dir / "store"

    def broker_dir(self) -> Path:
        """The folder queue of the embedded broker."""
        return self.data_dir / "broker"

    def spool_dir(self) -> Path:
        """Where uploads are spooled: beside the state, not in a possibly RAM-backed /tmp."""
        path = self.data_dir / "spool"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def previous_secrets(self) -> list[bytes]:
        return [secret.get_secret_value().strip().encode() for secret in self.previous_secret_keys]

    def signing_key(self) -> bytes:
        """The deployment's current secret; persisted when generated, so every process and
        restart agrees."""
        if self.secret_key is not None:
            return self.secret_key.get_secret_value().encode()
        key_file = self.data_dir / "secret.key"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            # Written whole under a temporary name, then linked: a reader never sees it half done,
            # and when several workers race, the first link wins and the others read it.
            staging = key_file.with_name(f".secret.key.{os.getpid()}")
            descriptor = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w") as file:
                file.write(secrets.token_urlsafe(32))
            try:
                os.link(staging, key_file)
            finally:
                staging.unlink()
        return key_file.read_text().strip().encode()


VIRTUAL_HOST_BUCKET = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")


def _check_endpoint(setting: str, url: str) -> None:
    """An S3 endpoint as a URL nodes are handed: scheme, host, port and an optional path prefix,
    nothing a request could misread (credentials, a query or a fragment)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as error:
        raise ValueError(f"{setting} {url!r} is not a URL: {error}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{setting} must be an http or https URL with a host, like "
                         f"https://s3.internal.example.com; got {url!r}")
    if parts.username is not None or parts.password is not None or parts.query or parts.fragment:
        raise ValueError(f"{setting} must name the server only (scheme, host, port and path): "
                         "no credentials, query or fragment")


@lru_cache
def get_settings() -> RegistrySettings:
    return RegistrySettings()
