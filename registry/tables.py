"""SQLAlchemy tables. Alembic migrations are the source of the schema; these must match them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON, BigInteger, Boolean, DateTime, Float, ForeignKey, Index, Integer, SmallInteger, String, Text,
    UniqueConstraint, false, func, text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[str]: JSON}


def created_at_column() -> Mapped[datetime]:
    return mapped_column(DateTime(timezone=True), server_default=func.now(), nullable=False)


class Tenant(Base):
    __tablename__ = "tenants"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    # Uploads must carry a model-signing signature by one of the tenant's signing keys.
    require_signed_uploads: Mapped[bool] = mapped_column(Boolean, server_default=false())
    # What people read; it may change. `name` is the slug in served names, signed active sets,
    # attestations and audit subjects, and never changes.
    display_name: Mapped[str | None] = mapped_column(String(128))
    # When set, every token of the tenant is refused and no new one is issued.
    disabled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # The tenant's own quotas; null means the deployment default from settings.
    max_waiting_evaluations: Mapped[int | None] = mapped_column(Integer)
    max_suites: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = created_at_column()


class TenantSigningKey(Base):
    """A public key a tenant's teams sign their uploads with (a model-signing bundle beside the
    adapter is verified against these)."""

    __tablename__ = "tenant_signing_keys"
    __table_args__ = (UniqueConstraint("tenant_id", "name"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    public_key_pem: Mapped[str] = mapped_column(Text)
    fingerprint: Mapped[str] = mapped_column(String(64))  # sha256 of the DER public key
    created_by: Mapped[str] = mapped_column(String(300))
    created_at: Mapped[datetime] = created_at_column()
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Identity(Base):
    """A person or service. Tokens come and go; the identity stays, and four-eyes compares
    identities and who issued their tokens, never names."""

    __tablename__ = "identities"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    tenant_id: Mapped[int | None] = mapped_column(ForeignKey("tenants.id"), index=True)
    created_at: Mapped[datetime] = created_at_column()
    # Another identity of the same person (old tokens, linked to a sign-on): four-eyes treats
    # every identity linked this way as one person (registry/sso/linking.py).
    same_as_id: Mapped[int | None] = mapped_column(ForeignKey("identities.id", name="fk_identities_same_as"))


class ApiToken(Base):
    __tablename__ = "api_tokens"
    id: Mapped[int] = mapped_column(primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    subject: Mapped[str] = mapped_column(String(128))
    identity_id: Mapped[int] = mapped_column(
        ForeignKey("identities.id", name="fk_api_tokens_identity_id_identities"), index=True)
    # The token that issued this one; None for tokens an operator made on the database directly.
    created_by_token_id: Mapped[int | None] = mapped_column(
        ForeignKey("api_tokens.id", name="fk_api_tokens_created_by"), index=True)
    # A node token's node id, or a router token's router id: the only one it may speak for.
    instance_id: Mapped[str | None] = mapped_column(String(64))
    role: Mapped[str] = mapped_column(String(16))
    tenant_id: Mapped[int | None] = mapped_column(ForeignKey("tenants.id"), index=True)
    pool_id: Mapped[int | None] = mapped_column(
        ForeignKey("pools.id", name="fk_api_tokens_pool_id"), index=True)  # a node or router token's pool
    tier: Mapped[str | None] = mapped_column(String(16))  # an app key's SLO tier
    created_at: Mapped[datetime] = created_at_column()
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # "issued" by a person or an operator; "sso-session", made at a dashboard sign-on for that
    # session alone (never shown, revoked at its sign-out); "sso-login", `loraplane login`'s.
    origin: Mapped[str] = mapped_column(String(16), server_default="issued")


class SsoIdentity(Base):
    """A person as their identity provider names them: issuer and subject, never a name."""

    __tablename__ = "sso_identities"
    __table_args__ = (UniqueConstraint("issuer", "subject", name="uq_sso_identities_issuer_subject"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    issuer: Mapped[str] = mapped_column(String(500))
    subject: Mapped[str] = mapped_column(String(255))
    identity_id: Mapped[int] = mapped_column(
        ForeignKey("identities.id", name="fk_sso_identities_identity"), index=True)
    created_at: Mapped[datetime] = created_at_column()
    last_sign_in_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class SsoSignIn(Base):
    """A sign-in in progress: its state is used once. A CLI's sign-in keeps what the provider's
    answer granted until the CLI exchanges it, once, for a token."""

    __tablename__ = "sso_sign_ins"
    id: Mapped[int] = mapped_column(primary_key=True)
    state_hash: Mapped[str] = mapped_column(String(64), unique=True)
    purpose: Mapped[str] = mapped_column(String(16))  # dashboard | cli
    cli_port: Mapped[int | None] = mapped_column(Integer)
    cli_challenge: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = created_at_column()
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    exchange_hash: Mapped[str | None] = mapped_column(String(64), unique=True)
    identity_id: Mapped[int | None] = mapped_column(ForeignKey("identities.id", name="fk_sso_sign_ins_identity"))
    role: Mapped[str | None] = mapped_column(String(16))
    tenant_id: Mapped[int | None] = mapped_column(ForeignKey("tenants.id", name="fk_sso_sign_ins_tenant"))
    display_name: Mapped[str | None] = mapped_column(String(128))
    grant_seal: Mapped[str | None] = mapped_column(String(64))  # keyed: see registry/sso/sign_ins.py
    exchanged_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class DashboardSession(Base):
    """A signed-in browser. The cookie holds a random secret; only its hash is stored, and
    signing out ends the row, so a copied cookie stops working at once."""

    __tablename__ = "dashboard_sessions"
    id: Mapped[int] = mapped_column(primary_key=True)
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    token_id: Mapped[int] = mapped_column(ForeignKey("api_tokens.id"), index=True)
    created_at: Mapped[datetime] = created_at_column()
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class BaseModel(Base):
    __tablename__ = "base_models"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    architecture: Mapped[str] = mapped_column(String(100))
    hidden_size: Mapped[int] = mapped_column(Integer)
    num_layers: Mapped[int] = mapped_column(Integer)
    vocab_size: Mapped[int] = mapped_column(Integer)
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = created_at_column()


class ModuleTableRow(Base):
    """A base's module table (base_models/module_table.py), derived once per config: bases
    registered from the same config.json share it."""

    __tablename__ = "module_tables"
    config_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    architecture: Mapped[str] = mapped_column(String(200))
    transformers: Mapped[str] = mapped_column(String(40))
    table: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = created_at_column()


class BaseModelAlias(Base):
    """Other names a base is known by, e.g. the path or hub id in adapters' configs."""

    __tablename__ = "base_model_aliases"
    id: Mapped[int] = mapped_column(primary_key=True)
    alias: Mapped[str] = mapped_column(String(200), unique=True)
    base_model_id: Mapped[int] = mapped_column(ForeignKey("base_models.id", ondelete="CASCADE"))


class Pool(Base):
    __tablename__ = "pools"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    base_model_id: Mapped[int] = mapped_column(ForeignKey("base_models.id"), index=True)
    max_loras: Mapped[int] = mapped_column(Integer)
    max_cpu_loras: Mapped[int] = mapped_column(Integer)
    max_lora_rank: Mapped[int] = mapped_column(Integer)
    dtype: Mapped[str] = mapped_column(String(16))
    required_suites: Mapped[list[str]] = mapped_column(JSON)
    # Bumped in the same transaction as every change to the pool's active set.
    generation: Mapped[int] = mapped_column(BigInteger, server_default="0")
    # Which nodes hold which adapters (registry/placement); changed only with the generation.
    placement: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = created_at_column()
    # Re-qualification (registry/requalification): what marked versions do until evaluated
    # again (keep_serving | suspend), the engines the active versions are qualified on (the
    # last is the pool's qualified engine), and the base config digest they were qualified with.
    requalify_policy: Mapped[str] = mapped_column(String(16), server_default="keep_serving")
    qualified_engines: Mapped[list[dict[str, Any]]] = mapped_column(JSON, server_default="[]")
    # Engine fingerprints an operator declared: a node reporting one needs no quorum.
    declared_engines: Mapped[list[str]] = mapped_column(JSON, server_default="[]")
    # Routers whose own traffic must each reach a canary's verdict before it acts on it.
    canary_min_routers: Mapped[int] = mapped_column(Integer, server_default="2")
    # refuse: the active set never outgrows what the nodes keep resident; on_demand: it may, and
    # the cold versions load at their first request (vLLM's resolver), within cold_tier_bytes of
    # each node's disk (registry/promotions/gates.py).
    overflow: Mapped[str] = mapped_column(String(16), server_default="refuse")
    cold_tier_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    qualified_config_sha256: Mapped[str | None] = mapped_column(String(64))
    # What the pool serves, signed with the attestation key at every change (active_set/
    # signed_set.py): the alias and retirement rows are its projection, never its source.
    signed_active_set: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), nullable=True)


class Adapter(Base):
    __tablename__ = "adapters"
    __table_args__ = (UniqueConstraint("tenant_id", "name"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    base_model_id: Mapped[int] = mapped_column(ForeignKey("base_models.id"), index=True)
    # What the adapter's own task requires (registry/evaluation_policies): its suites and the
    # margins a challenger is held to against the version it would replace. None: nothing.
    evaluation_policy: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # A policy that would weaken it waits here for a second person (evaluation_policies/service).
    proposed_evaluation_policy: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    policy_proposed_by: Mapped[str | None] = mapped_column(String(300))
    policy_proposed_by_identity_id: Mapped[int | None] = mapped_column(
        ForeignKey("identities.id", name="fk_adapters_policy_proposer_identity"))
    policy_proposed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = created_at_column()
    # active | retired (no new version, none promoted) | deleted (its versions' blobs released);
    # the name is never reused (registry/adapters/rules.py, registry/lifecycle/).
    state: Mapped[str] = mapped_column(String(16), server_default="active", index=True)
    retired_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class AdapterVersion(Base):
    __tablename__ = "adapter_versions"
    __table_args__ = (UniqueConstraint("adapter_id", "number"), UniqueConstraint("adapter_id", "digest"))
    id: Mapped[int] = mapped_column(primary_key=True)
    adapter_id: Mapped[int] = mapped_column(ForeignKey("adapters.id"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    digest: Mapped[str] = mapped_column(String(64), index=True)
    files: Mapped[list[dict[str, Any]]] = mapped_column(JSON)  # the manifest: name, sha256, size
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    rank: Mapped[int] = mapped_column(Integer)
    lora_alpha: Mapped[float]
    target_modules: Mapped[list[str]] = mapped_column(JSON)
    dtype: Mapped[str] = mapped_column(String(8))
    tensor_count: Mapped[int] = mapped_column(Integer)
    peft_config: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16))
    uploaded_by: Mapped[str] = mapped_column(String(128))
    uploaded_by_token_id: Mapped[int | None] = mapped_column(ForeignKey("api_tokens.id"))
    uploaded_by_identity_id: Mapped[int | None] = mapped_column(
        ForeignKey("identities.id", name="fk_adapter_versions_uploader_identity"))
    # The model-signing signature it came with, once verified: file, sha256, key fingerprint.
    upload_signature: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # README.md as uploaded (at most 256 KiB of UTF-8), also a blob in the manifest.
    model_card: Mapped[str | None] = mapped_column(Text)
    # When the served bytes (digest, files) were derived from the upload: the upload's digest
    # and manifest, and the transform (scaling_fold.TRANSFORM). None: served as uploaded.
    derived_from: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = created_at_column()
    # Set as `state` becomes retired or deleted (registry/adapters/rules.py).
    retired_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class BlobGcMark(Base):
    """A stored blob that nothing referenced when the collector last looked, and since when: it
    is collected once it has stayed unreferenced for the grace period (registry/blob_gc/)."""

    __tablename__ = "blob_gc_marks"
    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    unreferenced_since: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class EvalSuite(Base):
    """A named evaluation for one base: a JSONL dataset in the store, metrics with thresholds,
    and the generation settings every engine request uses."""

    __tablename__ = "eval_suites"
    id: Mapped[int] = mapped_column(primary_key=True)
    # A global suite's name, or a tenant's suite as tenant/name (names hold no '/').
    name: Mapped[str] = mapped_column(String(129), unique=True)
    # The tenant that owns the suite and its dataset; None for a global suite.
    tenant_id: Mapped[int | None] = mapped_column(ForeignKey("tenants.id", name="fk_eval_suites_tenant"),
                                                  index=True)
    base_model_id: Mapped[int] = mapped_column(ForeignKey("base_models.id"), index=True)
    dataset_sha256: Mapped[str] = mapped_column(String(64))
    example_count: Mapped[int] = mapped_column(Integer)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON)
    generation: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_by: Mapped[str] = mapped_column(String(300))
    created_at: Mapped[datetime] = created_at_column()


class Evaluation(Base):
    """One version against one suite. A worker claims it with a token and a lease; only the
    holder of an unexpired claim may record its result, so a redelivered task records once."""

    __tablename__ = "evaluations"
    __table_args__ = (Index("ix_evaluations_waiting", "state", "priority", "id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("adapter_versions.id"), index=True)
    suite_id: Mapped[int] = mapped_column(ForeignKey("eval_suites.id"), index=True)
    state: Mapped[str] = mapped_column(String(16), index=True)
    reason: Mapped[str | None] = mapped_column(Text)
    failing_metrics: Mapped[list[str]] = mapped_column(JSON)
    metrics: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    engine: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    timings: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    attempts: Mapped[int] = mapped_column(Integer)
    claim_token: Mapped[str | None] = mapped_column(String(36))
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    requested_by: Mapped[str] = mapped_column(String(300))
    # Claimed first when lower: 0 re-qualification (versions that serve), 1 everything else.
    priority: Mapped[int] = mapped_column(SmallInteger, server_default="1")
    # A challenger's evaluation names the incumbent's evaluation it is compared with: the two
    # are always claimed together, so they run on one engine in one batch.
    incumbent_evaluation_id: Mapped[int | None] = mapped_column(
        ForeignKey("evaluations.id", name="fk_evaluations_incumbent"), index=True)
    created_at: Mapped[datetime] = created_at_column()
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class EvaluationExample(Base):
    """Per-example results, written in the same transaction as the evaluation's outcome."""

    __tablename__ = "evaluation_examples"
    __table_args__ = (UniqueConstraint("evaluation_id", "position"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    evaluation_id: Mapped[int] = mapped_column(ForeignKey("evaluations.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)
    prompt: Mapped[str] = mapped_column(Text)
    reference: Mapped[str] = mapped_column(Text)
    output: Mapped[str] = mapped_column(Text)
    base_output: Mapped[str] = mapped_column(Text)
    exact_match: Mapped[bool]
    contains: Mapped[bool]
    reference_loglik: Mapped[float | None] = mapped_column(Float)
    base_reference_loglik: Mapped[float | None] = mapped_column(Float)
    parity_max_logprob_diff: Mapped[float | None] = mapped_column(Float)
    parity_tokens_match: Mapped[bool | None]


class DeploymentKey(Base):
    """A fingerprint of a key the registry seals or signs with, published as it starts: each
    worker and housekeeper compares its own before it starts (registry/deployment_keys/)."""

    __tablename__ = "deployment_keys"
    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(128))
    published_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class SecretCheckpoint(Base):
    """A rotated-out LORAPLANE_SECRET_KEY and the last audit event and token made before it was
    rotated out: it verifies nothing after (registry/secret_checkpoints/). Sealed with the
    secret that replaced it."""

    __tablename__ = "secret_checkpoints"
    id: Mapped[int] = mapped_column(primary_key=True)
    previous: Mapped[str] = mapped_column(String(32), unique=True)
    current: Mapped[str] = mapped_column(String(32))
    through_event: Mapped[int] = mapped_column(BigInteger)
    through_token: Mapped[int] = mapped_column(BigInteger)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    seal: Mapped[str] = mapped_column(String(64))


class AttestationKeyLedger(Base):
    """Attestation keys from the environment: the bundle's version, the signing key, and when each
    key it replaced stops being trusted (registry/attestation_keys/ledger.py). Sealed with the
    deployment's secret, so that a database writer cannot extend a replaced key's trust."""

    __tablename__ = "attestation_key_ledger"
    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    version: Mapped[int] = mapped_column(Integer)
    current_key_id: Mapped[str] = mapped_column(String(128))
    trust_ends: Mapped[dict[str, str]] = mapped_column(JSON)
    seal: Mapped[str] = mapped_column(String(64))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class AuditEvent(Base):
    """Append-only and hash-chained: each row carries the hash of the one before it, so an
    edited or removed row breaks the chain (`loraplane audit verify`). Rows are sealed at commit
    under a lock, which keeps the chain in id order across concurrent writers."""

    __tablename__ = "audit_events"
    # Evidence is read by subject: a version's upload and evaluations, a node's binding.
    __table_args__ = (Index("ix_audit_events_subject_action", "subject", "action"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[datetime] = created_at_column()
    actor: Mapped[str] = mapped_column(String(300))
    action: Mapped[str] = mapped_column(String(64), index=True)
    subject: Mapped[str] = mapped_column(String(300))
    tenant_id: Mapped[int | None] = mapped_column(ForeignKey("tenants.id"), index=True)
    before: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    after: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))
    # sha256 (events before migration 0006) or hmac-sha256 (keyed): see registry/audit/chain.py.
    hash_scheme: Mapped[str] = mapped_column(String(16), server_default="sha256")


class Promotion(Base):
    """A request to point a pool's alias of an adapter at one version. See promotions/rules.py."""

    __tablename__ = "promotions"
    __table_args__ = (
        # At most one open request per alias: a second concurrent one fails here, with a 409.
        Index("uq_promotions_open_alias", "pool_id", "adapter_id", "alias", unique=True,
              postgresql_where=text("state = 'awaiting_approval'"),
              sqlite_where=text("state = 'awaiting_approval'")),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id"), index=True)
    adapter_id: Mapped[int] = mapped_column(ForeignKey("adapters.id"), index=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("adapter_versions.id"), index=True)
    alias: Mapped[str] = mapped_column(String(32))
    weight: Mapped[int | None] = mapped_column(Integer)  # canary traffic percent
    kind: Mapped[str] = mapped_column(String(16))  # promote | rollback
    state: Mapped[str] = mapped_column(String(24), index=True)
    gates: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    # The promotion this one replaced when it became active; a rollback restores it.
    previous_id: Mapped[int | None] = mapped_column(ForeignKey("promotions.id"))
    requested_by: Mapped[str] = mapped_column(String(300))
    requested_by_subject: Mapped[str] = mapped_column(String(128))
    requested_by_identity_id: Mapped[int | None] = mapped_column(
        ForeignKey("identities.id", name="fk_promotions_requester_identity"))
    comment: Mapped[str | None] = mapped_column(Text)
    decided_by: Mapped[str | None] = mapped_column(String(300))
    decided_by_identity_id: Mapped[int | None] = mapped_column(
        ForeignKey("identities.id", name="fk_promotions_decider_identity"))
    decision_comment: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = created_at_column()
    decided_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    activated_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # A canary's analysis policy (registry/canaries), and where its analysis stands once active.
    analysis: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # The adapter's evaluation policy when this promotion went active: what a later promotion's
    # policy is compared with.
    evaluation_policy: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    analysis_state: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # A keyed hash of the policy and the state, made as the registry writes them (canaries/seals.py).
    analysis_seal: Mapped[str | None] = mapped_column(String(64))


class PoolAlias(Base):
    """What serves: the pool's alias of an adapter points at one version. The active set."""

    __tablename__ = "pool_aliases"
    __table_args__ = (UniqueConstraint("pool_id", "adapter_id", "alias"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id"), index=True)
    adapter_id: Mapped[int] = mapped_column(ForeignKey("adapters.id"))
    alias: Mapped[str] = mapped_column(String(32))
    version_id: Mapped[int] = mapped_column(ForeignKey("adapter_versions.id"))
    weight: Mapped[int | None] = mapped_column(Integer)
    promotion_id: Mapped[int] = mapped_column(ForeignKey("promotions.id"))


class PoolRetirement(Base):
    """A version that lost its last alias stays in the active set until traffic has moved: every
    live node has applied the generation that retired it, and the grace period has passed."""

    __tablename__ = "pool_retirements"
    __table_args__ = (UniqueConstraint("pool_id", "version_id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id"), index=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("adapter_versions.id"))
    generation: Mapped[int] = mapped_column(BigInteger)
    retired_at: Mapped[datetime] = created_at_column()


class RouterTraffic(Base):
    """The last traffic report of one router of a pool: requests per second by served name."""

    __tablename__ = "router_traffic"
    __table_args__ = (UniqueConstraint("pool_id", "router_id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id"), index=True)
    router_id: Mapped[str] = mapped_column(String(64))
    rates: Mapped[dict[str, float]] = mapped_column(JSON)
    reported_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class TrafficWindow(Base):
    """What one router saw of one served name under one alias between two of its reports; a
    canary's analysis sums these over its window. A report id is counted once."""

    __tablename__ = "traffic_windows"
    __table_args__ = (UniqueConstraint("pool_id", "router_id", "report_id", "served_name", "alias"),
                      Index("ix_traffic_windows_pool_name_at", "pool_id", "served_name", "at"))
    id: Mapped[int] = mapped_column(primary_key=True)
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id", ondelete="CASCADE"))
    router_id: Mapped[str] = mapped_column(String(64))
    report_id: Mapped[str] = mapped_column(String(36))
    served_name: Mapped[str] = mapped_column(String(140))
    alias: Mapped[str] = mapped_column(String(32))
    at: Mapped[datetime] = created_at_column()
    requests: Mapped[int] = mapped_column(BigInteger)
    errors: Mapped[dict[str, int]] = mapped_column(JSON)
    completion_tokens: Mapped[int] = mapped_column(BigInteger)
    busy_s: Mapped[float] = mapped_column(Float)
    ttft_buckets: Mapped[list[int]] = mapped_column(JSON)
    latency_buckets: Mapped[list[int]] = mapped_column(JSON)
    shadow_compared: Mapped[int] = mapped_column(BigInteger, server_default="0")
    shadow_agreed: Mapped[int] = mapped_column(BigInteger, server_default="0")
    # Of the answered requests, those sent to a node that did not hold the adapter (it loaded it
    # on demand), and their TTFTs; None on windows stored before routers counted them.
    cold_requests: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    cold_ttft_buckets: Mapped[list[int] | None] = mapped_column(JSON, nullable=True)
    # A keyed hash of every field above but the id, made as the registry stores the window
    # (traffic_windows/seals.py): a window written into the database directly does not count.
    seal: Mapped[str | None] = mapped_column(String(64))


class NodeStatus(Base):
    """The last report of one serving node's agent."""

    __tablename__ = "node_statuses"
    __table_args__ = (UniqueConstraint("pool_id", "node_id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id"), index=True)
    node_id: Mapped[str] = mapped_column(String(64))
    generation: Mapped[int] = mapped_column(BigInteger)
    loaded: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    failures: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    limits: Mapped[dict[str, Any]] = mapped_column(JSON)
    # Recent bytes that failed a re-check (tampered or rotted on the node's disk).
    incidents: Mapped[list[dict[str, Any]]] = mapped_column(JSON, server_default="[]")
    engine: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # vLLM version, flags, dtype
    reported_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    first_seen_at: Mapped[datetime] = created_at_column()


class NodeAddress(Base):
    """Where a node's vLLM is, as the operator bound it when issuing the node's token; never what
    the node says. `seal` is an HMAC under a key of the registry host's (registry/nodes/addresses.py)."""

    __tablename__ = "node_addresses"
    __table_args__ = (UniqueConstraint("pool_id", "node_id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id", ondelete="CASCADE"), index=True)
    node_id: Mapped[str] = mapped_column(String(64))
    vllm_url: Mapped[str] = mapped_column(String(500))
    seal: Mapped[str] = mapped_column(String(64))
    bound_by: Mapped[str] = mapped_column(String(300))
    bound_at: Mapped[datetime] = created_at_column()


class Webhook(Base):
    __tablename__ = "webhooks"
    id: Mapped[int] = mapped_column(primary_key=True)
    url: Mapped[str] = mapped_column(String(2000))
    tenant_id: Mapped[int | None] = mapped_column(ForeignKey("tenants.id"), index=True)
    events: Mapped[list[str]] = mapped_column(JSON)
    # Needed in the clear to sign deliveries; returned once at creation, never listed or logged.
    secret: Mapped[str] = mapped_column(String(100))
    created_by: Mapped[str] = mapped_column(String(300))
    created_at: Mapped[datetime] = created_at_column()
    disabled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class WebhookDelivery(Base):
    """An outbox row, written in the transaction of the event it reports."""

    __tablename__ = "webhook_deliveries"
    id: Mapped[int] = mapped_column(primary_key=True)
    webhook_id: Mapped[int] = mapped_column(ForeignKey("webhooks.id"), index=True)
    event: Mapped[str] = mapped_column(String(64))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16), index=True)  # pending | delivered | failed
    attempts: Mapped[int] = mapped_column(Integer, server_default="0")
    last_error: Mapped[str | None] = mapped_column(Text)
    last_status: Mapped[int | None] = mapped_column(Integer)
    next_attempt_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = created_at_column()
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Attestation(Base):
    """A signed statement that a version may serve in a pool: issued when a promotion points an
    alias at it (approval or rollback), and again when the signing key rotates."""

    __tablename__ = "attestations"
    __table_args__ = (Index("ix_attestations_pool_version", "pool_id", "version_id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id"))
    version_id: Mapped[int] = mapped_column(ForeignKey("adapter_versions.id"), index=True)
    promotion_id: Mapped[int | None] = mapped_column(ForeignKey("promotions.id"))
    action: Mapped[str] = mapped_column(String(24))  # approve | rollback | resign | backfill
    key_id: Mapped[str] = mapped_column(String(64))
    statement_sha256: Mapped[str] = mapped_column(String(64))
    envelope: Mapped[dict[str, Any]] = mapped_column(JSON)
    audit_event_hash: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = created_at_column()


class Requalification(Base):
    """A mark on an active version of a pool: its engine or base config changed since it was
    qualified, so it must pass the pool's required suites again. Open while cleared_at is null;
    at most one open mark per version and cause (a repeated report marks nothing new)."""

    __tablename__ = "requalifications"
    __table_args__ = (
        Index("uq_requalifications_open", "pool_id", "version_id", "cause", "target_sha256",
              unique=True, postgresql_where=text("cleared_at IS NULL"),
              sqlite_where=text("cleared_at IS NULL")),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id"), index=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("adapter_versions.id"), index=True)
    cause: Mapped[str] = mapped_column(String(16))  # engine | base_config
    # The new engine's fingerprint, or the new config digest: what the version qualifies for.
    target_sha256: Mapped[str] = mapped_column(String(64))
    before: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    after: Mapped[dict[str, Any]] = mapped_column(JSON)
    evaluation_ids: Mapped[list[int]] = mapped_column(JSON)  # requested when it was marked
    marked_by: Mapped[str] = mapped_column(String(300))
    marked_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    cleared_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    outcome: Mapped[str | None] = mapped_column(String(16))  # requalified | left_pool | superseded
    cleared_with: Mapped[list[int] | None] = mapped_column(JSON)  # the passed evaluations
