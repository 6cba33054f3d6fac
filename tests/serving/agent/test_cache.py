"""The agent's cache against a real HTTP server: verified downloads, refused bytes, an unreachable
store, and LRU eviction that spares what vLLM may reload from."""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from loraplane.digests import manifest_digest
from serving.agent.artifacts import AdapterCache, DigestMismatch, DownloadFailed


class Store:
    """Serves `files` by name; `status` lets a test make it fail."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.status, self.requests = 200, 0
        store = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                store.requests += 1
                body = store.files.get(self.path.lstrip("/"), b"")
                self.send_response(store.status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def store():
    served = Store()
    yield served
    served.server.shutdown()


def entry(store: Store, name: str, files: dict[str, bytes], *, published: dict[str, bytes] | None = None) -> dict:
    """An active-set entry for `files`; the store serves `published` (default: the same bytes)."""
    for file_name, data in (published or files).items():
        store.files[f"{name}/{file_name}"] = data
    specs = [{"name": n, "sha256": hashlib.sha256(d).hexdigest(), "size": len(d)} for n, d in files.items()]
    return {"served_name": f"acme/{name}@1", "digest": manifest_digest(specs),
            "files": [{**s, "url": f"{store.url}/{name}/{s['name']}"} for s in specs]}


FILES = {"adapter_config.json": b'{"r": 8}', "adapter_model.safetensors": b"w" * 5000}


def test_a_download_is_verified_and_renamed_into_place_once(store, tmp_path):
    cache = AdapterCache(tmp_path / "cache", 10**6, timeout_s=5)
    wanted = entry(store, "good", FILES)

    folder = asyncio.run(cache.ensure(wanted))
    again = asyncio.run(cache.ensure(wanted))

    assert folder == again == tmp_path / "cache" / wanted["digest"]
    assert (folder / "adapter_model.safetensors").read_bytes() == FILES["adapter_model.safetensors"]
    assert cache.digest_at(str(folder)) == wanted["digest"]
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
    forged = {**entry(store, "forged", FILES), "digest": "0" * 64}
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
    assert asyncio.run(cache.ensure(wanted)).name == wanted["digest"]


def test_eviction_drops_the_least_recently_used_but_never_a_pinned_folder(store, tmp_path):
    cache = AdapterCache(tmp_path / "cache", max_bytes=12_000, timeout_s=5)
    entries = [entry(store, f"a{i}", {"adapter_config.json": b"{}",
                                      "adapter_model.safetensors": bytes([i]) * 5000}) for i in range(3)]
    folders = [asyncio.run(cache.ensure(e)) for e in entries]
    for age, folder in enumerate(folders):  # a0 oldest, a2 newest
        os.utime(folder, (1_000_000 + age, 1_000_000 + age))

    evicted = cache.evict(pinned={entries[0]["digest"]})

    assert evicted == [entries[1]["digest"]]  # a0 is older but vLLM may reload from it
    assert sorted(os.listdir(tmp_path / "cache")) == sorted([entries[0]["digest"], entries[2]["digest"]])
