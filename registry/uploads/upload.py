"""The upload use case, from received files to a recorded version.

Checking and storing read and copy up to the upload limit, so they run between two short
transactions rather than inside one: no database lock or pooled connection waits on that I/O.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from registry.adapters import model_card, peft_config, service, upload_files, upload_signature, validation
from registry.adapters.receive import BASE_MODEL_FIELD, ReceivedUpload
from registry.adapters.safetensors_check import FILE as WEIGHTS_FILE
from registry.adapters.schemas import VersionOut
from registry.auth.principal import Principal
from registry.db import transaction
from registry.evaluations import service as evaluations
from registry.settings import RegistrySettings
from registry.storage.base import ArtifactStore


def upload_version(store: ArtifactStore, settings: RegistrySettings, *, principal: Principal,
                   tenant: str, name: str, received: ReceivedUpload, workdir: Path
                   ) -> tuple[VersionOut, bool]:
    files = upload_files.collect(received.files, settings, workdir)
    spec = peft_config.parse_config(files.config)
    with transaction() as session:
        target = service.upload_target(session, tenant=tenant, name=name, spec=spec,
                                       base_model=received.fields.get(BASE_MODEL_FIELD))
    signature = upload_signature.check(files.signature, _signed_files(files), target.signing,
                                       tenant, workdir)
    layout = validation.check_weights(files, spec, target.base.table, settings.max_header_bytes)
    manifest = service.store_blobs(store, files, received)
    with transaction() as session:
        version, created = service.record_version(
            session, principal, target, spec, layout, manifest, signature,
            card=None if files.model_card is None else files.model_card.decode())
        queued = (evaluations.request_required(session, tenant, name, version.number,
                                               actor=principal.label) if created else [])
    if queued:  # their tasks went to the workers as the transaction committed
        version = version.model_copy(update={"state": evaluations.VERSION_EVALUATING})
    return version, created


def _signed_files(files: upload_files.AdapterFiles) -> list[upload_signature.SignedFile]:
    """What a signature must list: the adapter files (the model card too, when it came), with
    the digests taken as they arrived."""
    card = ([] if files.model_card is None else
            [upload_signature.SignedFile(model_card.FILE, hashlib.sha256(files.model_card).hexdigest())])
    return [upload_signature.SignedFile(peft_config.FILE, hashlib.sha256(files.config).hexdigest()),
            upload_signature.SignedFile(WEIGHTS_FILE, files.weights_sha256), *card]
