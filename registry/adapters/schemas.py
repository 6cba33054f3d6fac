from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel


class VersionOut(BaseModel):
    tenant: str
    adapter: str
    number: int
    served_name: str
    base_model: str
    digest: str
    size_bytes: int
    rank: int
    lora_alpha: float
    target_modules: list[str]
    dtype: str
    tensor_count: int
    state: str
    uploaded_by: str
    created_at: datetime


class AdapterOut(BaseModel):
    tenant: str
    name: str
    base_model: str
    latest_version: int | None
    created_at: datetime


class DownloadOut(BaseModel):
    url: str
    digest: str
    size_bytes: int
    expires_in: int
