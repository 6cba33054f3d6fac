"""Artifact storage: S3 (or any S3-compatible server) in production, a folder when embedded."""

from __future__ import annotations

from functools import lru_cache

from registry.settings import RegistrySettings, get_settings
from registry.storage.base import ArtifactStore


def make_store(settings: RegistrySettings) -> ArtifactStore:
    if settings.storage == "s3":
        from registry.storage.s3 import S3Store

        return S3Store(settings)
    from registry.storage.local import LocalStore

    return LocalStore(settings)


@lru_cache
def get_store() -> ArtifactStore:
    return make_store(get_settings())
