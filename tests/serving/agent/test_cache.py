"""The agent's cache against a real HTTP server: verified downloads, refused bytes, an unreachable
store, and LRU eviction that spares what vLLM may reload from."""

from __future__ import annotations

import asyncio
import os

import pytest

from serving.agent.artifacts import AdapterCache, DigestMismatch, DownloadFailed
from serving.agent.entries import Entry
from tests.serving.agent.stand_ins import Store
from tests.serving.agent.stand_ins import entry as raw_entry


def entry(store: Store, name: str, files: dict[str, bytes], **kwargs) -> Entry:
    return Entry.model_validate(raw_entry(store, name, files, **kwargs))


FILES = {"adapter_config.json": b'{"r": 8}', "adapter_model.safetensors": b"w" * 5000}


def test_a_download_is_verified_and_renamed_into_place_once(store, tmp_path):
    cache = AdapterCache(tmp_path / "cache", 10**6, timeout_s=5)
    wanted = entry(store, "good", FILES)

    folder = asyncio.run(cache.ensure(wanted))
    again = asyncio.run(cache.ensure(wanted))

    assert folder == again == tmp_path / "cache" / wanted.digest
    assert (folder / "adapter_model.safetensors").read_bytes() == FILES["adapter_model.safetensors"]
    assert cache.digest_at(str(folder)) == wanted.digest
    assert store.requests == 2  # the second call was a cache hit


@pytest.mark.parametrize(("published", "message"), [
    ({**FILES, "adapter_model.safetensors": b"x" * 5000}, "sha256 mismatch for adapter_model.safetensors"),
    ({**FILES, "adapter_model.safetensors": b"w" * 6000}, "sha256 mismatch for adapter_model.safetensors"),
])
def test_other_bytes_are_refused_and_nothing_is_kept(store, tmp_path, published, message):
    cache = AdapterCache(tmp_path / "cache", 10**6, timeout_s=5)
    with pytest.raises(DigestMismatch, match=message):
        asyncio.run(cache.ensure(entry(store, "swapped", FILES, published=published)))
    assert os.listdir(tmp_path / "cache") == []


def test_a_file_list_that_does_not_match_its_digest_is_refused(store, tmp_path):
    cache = AdapterCache(tmp_path / "cache", 10**6, timeout_s=5)
    forged = entry(store, "forged", FILES).model_copy(update={"digest": "0" * 64})
    with pytest.raises(DigestMismatch, match="does not match its digest"):
        asyncio.run(cache.ensure(forged))
    assert store.requests == 0


def test_an_unavailable_store_is_a_retryable_failure(store, tmp_path):
    cache = AdapterCache(tmp_path / "cache", 10**6, timeout_s=5)
    wanted = entry(store, "later", FILES)
    store.status = 503
    with pytest.raises(DownloadFailed, match="the store answered HTTP 503"):
        asyncio.run(cache.ensure(wanted))
    assert os.listdir(tmp_path / "cache") == []
    store.status = 200
    assert asyncio.run(cache.ensure(wanted)).name == wanted.digest


def test_eviction_drops_the_least_recently_used_but_never_a_pinned_folder(store, tmp_path):
    cache = AdapterCache(tmp_path / "cache", max_bytes=12_000, timeout_s=5)
    entries = [entry(store, f"a{i}", {"adapter_config.json": b"{}",
                                      "adapter_model.safetensors": bytes([i]) * 5000}) for i in range(3)]
    folders = [asyncio.run(cache.ensure(e)) for e in entries]
    for age, folder in enumerate(folders):  # a0 oldest, a2 newest
        os.utime(folder, (1_000_000 + age, 1_000_000 + age))

    evicted = cache.evict(pinned={entries[0].digest})

    assert evicted == [entries[1].digest]  # a0 is older but vLLM may reload from it
    assert sorted(os.listdir(tmp_path / "cache")) == sorted([entries[0].digest, entries[2].digest])
