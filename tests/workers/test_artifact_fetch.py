"""The worker evaluates a version's bytes only when its manifest makes its digest and every file
is its sha256: a row whose digest and files were changed apart is refused before any engine work."""

from __future__ import annotations

import hashlib

import pytest

from registry.adapters.artifact import blob_key
from registry.settings import RegistrySettings
from registry.storage.local import LocalStore
from signed_digests.digests import manifest_digest
from workers.evaluation.artifacts import ArtifactCorrupt, fetch


@pytest.fixture
def stored(tmp_path):
    store = LocalStore(RegistrySettings(data_dir=tmp_path / "data", public_url="http://127.0.0.1:9"))
    files = []
    for name, data in (("adapter_config.json", b'{"r": 8}'), ("adapter_model.safetensors", b"weights")):
        sha = hashlib.sha256(data).hexdigest()
        store.put_bytes(blob_key(sha), data)
        files.append({"name": name, "sha256": sha, "size": len(data)})
    return store, files


def test_a_manifest_that_makes_its_digest_is_fetched_and_verified(stored, tmp_path):
    store, files = stored
    folder = fetch(store, tmp_path / "cache", manifest_digest(files), files)
    assert sorted(p.name for p in folder.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]


def test_a_digest_its_manifest_does_not_make_is_refused_and_nothing_is_cached(stored, tmp_path):
    store, files = stored
    other = "e" * 64
    with pytest.raises(ArtifactCorrupt, match=f"the manifest of {other} does not make that digest"):
        fetch(store, tmp_path / "cache", other, files)
    assert not (tmp_path / "cache").exists() or list((tmp_path / "cache").iterdir()) == []
