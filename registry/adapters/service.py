"""Adapters and their immutable versions: upload, read and download."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from sqlalchemy.orm import Session

from registry import audit
from registry.adapters import artifact, model_card, repository, rules, upload_signature, validation
from registry.adapters.lora_layout import LoraLayout
from registry.adapters.peft_config import LoraSpec
from registry.adapters.receive import WEIGHTS_SHA256_FIELD, ReceivedUpload
from registry.adapters.schemas import AdapterOut, DownloadFile, DownloadOut, VersionOut
from registry.adapters.upload_files import AdapterFiles
from registry.adapters.validation import TargetBase
from registry.auth.principal import Principal, Role
from registry.errors import Conflict, NotFound, Unprocessable
from registry.names import check_name
from registry.rows import existing
from registry.settings import RegistrySettings
from registry.signing_keys.service import UploadPolicy, upload_policy
from registry.storage.base import ArtifactStore
from registry.tables import Adapter, AdapterVersion, BaseModel, Tenant
from signed_digests.digests import manifest_digest

READERS = {Role.ADMIN, Role.UPLOADER, Role.REVIEWER}
UPLOADERS = {Role.ADMIN, Role.UPLOADER}
INITIAL_STATE = "validated"


@dataclass(frozen=True)
class UploadTarget:
    tenant_id: int
    tenant: str
    name: str
    base: TargetBase
    signing: UploadPolicy


def upload_target(session: Session, *, tenant: str, name: str, spec: LoraSpec,
                  base_model: str | None) -> UploadTarget:
    """Where an upload goes: its tenant, the base it must match, and the keys its signature must
    verify with. Only reads."""
    tenant_row = _tenant(session, tenant)
    base = validation.resolve_base(session, spec, base_model)
    existing = repository.adapter_by_name(session, tenant_row.id, name)
    if existing is not None:
        rules.require_open(existing, f"{tenant}/{name}")
        _check_same_base(existing, base, tenant, name)
    return UploadTarget(tenant_id=tenant_row.id, tenant=tenant, name=name, base=base,
                        signing=upload_policy(session, tenant_row))


def record_version(session: Session, principal: Principal, target: UploadTarget, spec: LoraSpec,
                   layout: LoraLayout, manifest: list[dict], upload_signature: dict | None = None,
                   card: str | None = None, derived_from: dict | None = None) -> tuple[VersionOut, bool]:
    """Record a checked, stored version, with its verified signature and its model card if they
    came with it. `manifest` is what the version serves; `derived_from` (derivation()) the upload
    it was derived from, if it is not the upload itself. Returns (version, created)."""
    adapter = repository.lock_or_create_adapter(session, target.tenant_id, target.name, target.base.id)
    _check_same_base(adapter, target.base, target.tenant, target.name)  # another upload may have won
    rules.require_open(adapter, f"{target.tenant}/{target.name}")  # retired meanwhile
    digest = manifest_digest(manifest)
    same = repository.version_by_digest(session, adapter.id, digest)
    if same is not None and same.state == rules.DELETED:
        raise Conflict(f"these bytes were {target.tenant}/{target.name}@{same.number}, which was "
                       "deleted", code="version_deleted",
                       hint="A deleted version stays deleted and its name is never reused for "
                            "other bytes; upload under a new adapter name.")
    if same is not None:
        return version_out(session, same), False
    version = AdapterVersion(
        adapter_id=adapter.id,
        number=(repository.latest_version_number(session, adapter.id) or 0) + 1,
        digest=digest,
        files=manifest,
        size_bytes=sum(entry["size"] for entry in manifest),
        rank=layout.rank,
        lora_alpha=spec.lora_alpha,
        target_modules=list(layout.modules),
        dtype=layout.dtype,
        tensor_count=layout.tensor_count,
        peft_config=spec.raw,
        state=INITIAL_STATE,
        uploaded_by=principal.subject,
        uploaded_by_token_id=principal.token_id,
        uploaded_by_identity_id=principal.identity_id or None,
        upload_signature=upload_signature,
        model_card=card,
        derived_from=derived_from,
    )
    session.add(version)
    session.flush()
    out = version_out(session, version)
    return audit.record_created(session, out, actor=principal.label, action="adapter_version.upload",
                                subject=out.served_name, tenant_id=target.tenant_id), True


def store_blobs(store: ArtifactStore, files: AdapterFiles, received: ReceivedUpload) -> list[dict]:
    """Put the blobs in the store; only validated bytes (and a verified signature) get here."""
    declared = received.fields.get(WEIGHTS_SHA256_FIELD)
    if declared is not None and declared.lower() != files.weights_sha256:
        raise Unprocessable(
            f"adapter_model.safetensors has sha256 {files.weights_sha256}, but the upload "
            f"declared {declared}", code="digest_mismatch",
            hint="The file changed or was damaged in transit; upload it again.",
        )
    config_sha256 = _put_bytes(store, files.config)
    if received.streamed is not None:
        received.streamed.complete()
    else:
        store.put_file(artifact.blob_key(files.weights_sha256), files.weights)
    card = None
    if files.model_card is not None:
        card_sha256 = _put_bytes(store, files.model_card)
        card = {"name": model_card.FILE, "sha256": card_sha256, "size": len(files.model_card)}
    signature = files.signature
    if signature is not None:
        store.put_file(artifact.blob_key(signature.sha256), signature.path)
    return artifact.manifest(
        config_sha256=config_sha256, config_size=len(files.config),
        weights_sha256=files.weights_sha256, weights_size=files.weights_size, model_card=card,
        signature=None if signature is None else {"name": signature.filename,
                                                  "sha256": signature.sha256, "size": signature.size})


def _put_bytes(store: ArtifactStore, data: bytes) -> str:
    """Store a small file under its content address; its sha256."""
    sha256 = hashlib.sha256(data).hexdigest()
    store.put_bytes(artifact.blob_key(sha256), data)
    return sha256


def derivation(uploaded: list[dict], transform: str) -> dict:
    """What a version records of the upload its served bytes were derived from."""
    return {"digest": manifest_digest(uploaded), "files": uploaded, "transform": transform}


def store_served(store: ArtifactStore, served: AdapterFiles, uploaded: list[dict]) -> list[dict]:
    """Put a derived artifact's blobs in the store. Its manifest keeps the upload's model card
    and signature (which signs the upload's files), so that a signed and an unsigned upload of
    the same adapter stay two versions, as they are without a fold."""
    config_sha256 = _put_bytes(store, served.config)
    store.put_file(artifact.blob_key(served.weights_sha256), served.weights)
    uploaded_file = {entry["name"]: entry for entry in uploaded}.get
    return artifact.manifest(config_sha256=config_sha256, config_size=len(served.config),
                             weights_sha256=served.weights_sha256, weights_size=served.weights_size,
                             model_card=uploaded_file(model_card.FILE),
                             signature=uploaded_file(upload_signature.FILE))


def _check_same_base(adapter: Adapter, base: TargetBase, tenant: str, name: str) -> None:
    if adapter.base_model_id != base.id:
        raise Unprocessable(
            f"adapter {tenant}/{name} is for another base model than {base.name!r}",
            code="base_model_changed", hint="Upload it under a new adapter name.",
        )


def list_adapters(session: Session, principal: Principal, *, tenant: str | None,
                  base_model: str | None, limit: int, cursor: str | None,
                  name_contains: str | None = None, state: str | None = None,
                  pool: str | None = None):
    """A page of adapters, oldest first: a tenant's people see their own tenant's only.
    `name_contains` is matched literally, `state` is one of rules.ADAPTER_STATES, and `pool`
    keeps the adapters a version of which the pool serves or is still retiring."""
    principal.require(READERS, tenant)
    tenant = tenant if principal.is_global_admin else principal.tenant
    if state is not None and state not in rules.ADAPTER_STATES:
        raise Unprocessable(f"state {state[:32]!r} is not an adapter state",
                            code="invalid_state", hint=f"Use one of {', '.join(rules.ADAPTER_STATES)}.")
    rows, next_cursor = repository.page_of_adapters(
        session, tenant=tenant, base_model=base_model, limit=limit, cursor=cursor,
        name_contains=(name_contains or "").strip().lower() or None, state=state, pool=pool)
    return [adapter_out(session, row) for row in rows], next_cursor


def get_adapter(session: Session, principal: Principal, tenant: str, name: str) -> AdapterOut:
    principal.require(READERS, tenant)
    return adapter_out(session, find_adapter(session, tenant, name))


def list_versions(session: Session, principal: Principal, tenant: str, name: str, *,
                  state: str | None, limit: int, cursor: str | None):
    principal.require(READERS, tenant)
    adapter = find_adapter(session, tenant, name)
    rows, next_cursor = repository.page_of_versions(
        session, adapter.id, state=state, limit=limit, cursor=cursor)
    return [version_out(session, row) for row in rows], next_cursor


def get_version(session: Session, principal: Principal, tenant: str, name: str, number: int) -> VersionOut:
    principal.require(READERS, tenant)
    return version_out(session, find_version(session, tenant, name, number))


def card_of(session: Session, principal: Principal, tenant: str, name: str, number: int) -> str:
    principal.require(READERS, tenant)
    version = find_version(session, tenant, name, number)
    _refuse_deleted(version, f"{tenant}/{name}@{number}")
    card = version.model_card
    if card is None:
        raise NotFound(f"{tenant}/{name}@{number} was uploaded without a model card",
                       code="model_card_not_found",
                       hint=f"Upload the adapter with the {model_card.FILE} peft writes beside it.")
    return card


def download(session: Session, store: ArtifactStore, settings: RegistrySettings,
             principal: Principal, tenant: str, name: str, number: int, *, uploaded: bool = False) -> DownloadOut:
    """The served files, or with `uploaded` the files as uploaded (the same unless the version
    was derived from its upload)."""
    principal.require(READERS, tenant)
    version = find_version(session, tenant, name, number)
    _refuse_deleted(version, f"{tenant}/{name}@{number}")
    digest, files = version.digest, version.files
    if uploaded and version.derived_from is not None:
        digest, files = version.derived_from["digest"], version.derived_from["files"]
    return DownloadOut(
        digest=digest,
        expires_in=settings.presign_ttl_s,
        files=[DownloadFile(**entry, url=store.presigned_url(artifact.blob_key(entry["sha256"]),
                                                             settings.presign_ttl_s))
               for entry in files],
    )


def _tenant(session: Session, name: str) -> Tenant:
    row = repository.tenant_by_name(session, check_name(name, "tenant"))
    if row is None:
        raise NotFound(f"tenant {name!r} does not exist", code="tenant_not_found",
                       hint="A global admin creates it: loraplane tenant create NAME.")
    return row


def find_adapter(session: Session, tenant: str, name: str) -> Adapter:
    row = repository.adapter_by_name(session, _tenant(session, tenant).id, name)
    if row is None:
        raise NotFound(f"adapter {tenant}/{name} does not exist", code="adapter_not_found",
                       hint="Upload a version first (loraplane push).")
    return row


def find_adapter_for_update(session: Session, tenant: str, name: str) -> Adapter:
    """find_adapter, its row locked until the transaction ends, and read afresh."""
    return existing(session, Adapter, find_adapter(session, tenant, name).id, with_for_update=True,
                    populate_existing=True)


def find_version(session: Session, tenant: str, name: str, number: int) -> AdapterVersion:
    row = repository.version_by_number(session, find_adapter(session, tenant, name).id, number)
    if row is None:
        raise NotFound(f"adapter {tenant}/{name} has no version {number}", code="version_not_found",
                       hint=f"List versions with GET /v1/adapters/{tenant}/{name}/versions.")
    return row


def _refuse_deleted(version: AdapterVersion, served_name: str) -> None:
    if version.state == rules.DELETED:
        raise Conflict(f"{served_name} was deleted: its files are no longer kept",
                       code="version_deleted",
                       hint="Its record and audit trail remain (GET the version, or the audit log).")


def adapter_out(session: Session, row: Adapter) -> AdapterOut:
    return AdapterOut(
        tenant=existing(session, Tenant, row.tenant_id).name,
        name=row.name,
        base_model=existing(session, BaseModel, row.base_model_id).name,
        latest_version=repository.latest_version_number(session, row.id),
        state=row.state,
        created_at=row.created_at,
        retired_at=row.retired_at,
        deleted_at=row.deleted_at,
    )


def version_out(session: Session, row: AdapterVersion) -> VersionOut:
    adapter = existing(session, Adapter, row.adapter_id)
    tenant = existing(session, Tenant, adapter.tenant_id).name
    return VersionOut(
        tenant=tenant,
        adapter=adapter.name,
        number=row.number,
        served_name=f"{tenant}/{adapter.name}@{row.number}",
        base_model=existing(session, BaseModel, adapter.base_model_id).name,
        digest=row.digest,
        size_bytes=row.size_bytes,
        files=row.files,
        rank=row.rank,
        lora_alpha=row.lora_alpha,
        target_modules=row.target_modules,
        dtype=row.dtype,
        tensor_count=row.tensor_count,
        state=row.state,
        uploaded_by=row.uploaded_by,
        upload_signature=row.upload_signature,
        derived_from=row.derived_from,
        created_at=row.created_at,
        retired_at=row.retired_at,
        deleted_at=row.deleted_at,
    )


