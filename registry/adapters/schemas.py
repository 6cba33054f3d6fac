from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel


class ManifestFile(BaseModel):
    name: str
    sha256: str
    size: int


class UploadSignatureOut(BaseModel):
    """The model-signing signature the version was uploaded with, verified at upload."""

    file: str
    sha256: str
    key_name: str
    key_fingerprint: str
    verified_at: datetime


class DerivedFromOut(BaseModel):
    """The upload a version's served bytes were derived from: its digest and files, kept in
    the store, and the transform that derived them."""

    digest: str
    files: list[ManifestFile]
    transform: str


class VersionOut(BaseModel):
    tenant: str
    adapter: str
    number: int
    served_name: str
    base_model: str
    digest: str
    size_bytes: int
    files: list[ManifestFile]
    rank: int
    lora_alpha: float
    target_modules: list[str]
    dtype: str
    tensor_count: int
    state: str
    uploaded_by: str
    upload_signature: UploadSignatureOut | None = None
    # Set when the served files were derived from the upload (fold_scaling): digest and files
    # above are what nodes serve, this is what was uploaded.
    derived_from: DerivedFromOut | None = None
    created_at: datetime
    # Set once the version is retired or deleted (state says which it is now). A deleted
    # version's files, derived_from files, signature and model card are no longer kept.
    retired_at: datetime | None = None
    deleted_at: datetime | None = None


class AdapterOut(BaseModel):
    tenant: str
    name: str
    base_model: str
    latest_version: int | None
    state: str = "active"  # active | retired | deleted
    created_at: datetime
    retired_at: datetime | None = None
    deleted_at: datetime | None = None


class DownloadFile(ManifestFile):
    url: str


class DownloadOut(BaseModel):
    """The version's manifest with a presigned URL per file. `digest` is the manifest's sha256."""

    digest: str
    expires_in: int
    files: list[DownloadFile]
