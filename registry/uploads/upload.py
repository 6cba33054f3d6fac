"""The upload use case, from received files to a recorded version.

Checking and storing read and copy up to the upload limit, so they run between two short
transactions rather than inside one: no database lock or pooled connection waits on that I/O.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

from registry.adapters import (lora_layout, model_card, peft_config, scaling_fold, served_artifact, service,
                               upload_files, upload_signature, validation)
from registry.adapters.receive import BASE_MODEL_FIELD, FOLD_SCALING_FIELD, ReceivedUpload
from registry.adapters.safetensors_check import FILE as WEIGHTS_FILE
from registry.adapters.schemas import VersionOut
from registry.auth.principal import Principal
from registry.blob_gc import service as blob_gc
from registry.errors import Unprocessable
from registry.evaluations import quotas
from registry.evaluations import service as evaluations
from registry.settings import RegistrySettings
from registry.storage.base import ArtifactStore
from registry.work_scope import BeginWork, opened


def upload_version(begin_work: BeginWork, store: ArtifactStore, settings: RegistrySettings, *, principal: Principal,
                   tenant: str, name: str, received: ReceivedUpload, workdir: Path
                   ) -> tuple[VersionOut, bool]:
    fold = _fold_requested(received)
    files = upload_files.collect(received.files, settings, workdir)
    spec = peft_config.parse_config(files.config)
    with opened(begin_work) as work:
        session = work.session
        target = service.upload_target(session, tenant=tenant, name=name, spec=spec,
                                       base_model=received.fields.get(BASE_MODEL_FIELD))
        # A new version is evaluated at once: refused before its bytes are stored while its
        # tenant's evaluations fill their quota.
        quotas.check_waiting(session, target.tenant_id, tenant)
    signature = upload_signature.check(files.signature, _signed_files(files), target.signing,
                                       tenant, workdir)
    layout = validation.check_weights(files, spec, target.base.table, settings.max_header_bytes)
    served = (served_artifact.fold(files, spec, layout, target.base.table, settings, workdir)
              if fold and scaling_fold.needed(spec) else None)
    lora_layout.refuse_uneven_expert_ranks(layout if served is None else served.layout)
    manifest = service.store_blobs(store, files, received)
    derived_from = None
    if served is not None:
        derived_from = service.derivation(manifest, scaling_fold.TRANSFORM)
        manifest = service.store_served(store, served.files, manifest)
        spec, layout = served.spec, served.layout
    with opened(begin_work) as work:
        session = work.session
        if blob_gc.hold(session, store, _blob_digests(manifest, derived_from)):
            # Collected since they were checked (the same bytes, unreferenced past the grace
            # period): stored again under the blobs' locks, which the collector waits on.
            _store_again(store, files, received, served)
        version, created = service.record_version(
            session, principal, target, spec, layout, manifest, signature,
            card=None if files.model_card is None else files.model_card.decode(),
            derived_from=derived_from)
        queued = (evaluations.request_required(session, tenant, name, version.number,
                                               actor=principal.label) if created else [])
        if queued:  # counted again with them, under the tenant's lock: uploads racing each other
            quotas.check_waiting(session, target.tenant_id, tenant, adding=0)
    if queued:  # their tasks went to the workers as the transaction committed
        version = version.model_copy(update={"state": evaluations.VERSION_EVALUATING})
    return version, created


def _blob_digests(manifest: list[dict], derived_from: dict | None) -> list[str]:
    uploaded = derived_from["files"] if derived_from is not None else []
    return [entry["sha256"] for entry in [*manifest, *uploaded]]


def _store_again(store: ArtifactStore, files: upload_files.AdapterFiles, received: ReceivedUpload,
                 served: served_artifact.ServedArtifact | None) -> None:
    """Put every blob of the upload again from its spooled files; those still there are skipped."""
    uploaded = service.store_blobs(store, files, dataclasses.replace(received, streamed=None))
    if served is not None:
        service.store_served(store, served.files, uploaded)


def _fold_requested(received: ReceivedUpload) -> bool:
    value = received.fields.get(FOLD_SCALING_FIELD, "false").lower()
    if value not in ("true", "false"):
        raise Unprocessable(f"{FOLD_SCALING_FIELD} is {value[:20]!r}; it must be true or false",
                            code="invalid_field", hint=f"Send {FOLD_SCALING_FIELD}=true, or leave it out.")
    return value == "true"


def _signed_files(files: upload_files.AdapterFiles) -> list[upload_signature.SignedFile]:
    """What a signature must list: the adapter files (the model card too, when it came), with
    the digests taken as they arrived."""
    card = ([] if files.model_card is None else
            [upload_signature.SignedFile(model_card.FILE, hashlib.sha256(files.model_card).hexdigest())])
    return [upload_signature.SignedFile(peft_config.FILE, hashlib.sha256(files.config).hexdigest()),
            upload_signature.SignedFile(WEIGHTS_FILE, files.weights_sha256), *card]
