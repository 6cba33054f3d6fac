"""Concurrent uploads: identical bytes give one version; different bytes get 1..N, no gaps."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx

UPLOADS = 10


def post_all(registry_url: str, token: str, adapter: str, uploads: list[list[tuple[str, bytes]]]):
    """Post every upload at once; one turned away for the process's upload limit (429) is sent
    again, as a client does, so that all of them race for their version numbers."""
    def post(files):
        with httpx.Client(base_url=registry_url, timeout=120,
                          headers={"Authorization": f"Bearer {token}"}) as client:
            while True:
                response = client.post(f"/v1/adapters/{adapter}/versions",
                                       files=[("file", f) for f in files])
                if response.status_code != 429:
                    return response
                time.sleep(0.05)  # far under Retry-After, to keep the race tight

    with ThreadPoolExecutor(max_workers=len(uploads)) as pool:
        return list(pool.map(post, uploads))


def files_of(folder):
    return [(n, (folder / n).read_bytes()) for n in ("adapter_config.json", "adapter_model.safetensors")]


def test_identical_concurrent_uploads_make_one_version(registry, tokens, uploader, base_model, make_adapter):
    files = files_of(make_adapter(seed=51))

    responses = post_all(registry.url, tokens["acme_uploader"], "acme/same-time", [files] * UPLOADS)

    assert sorted(r.status_code for r in responses) == [200] * (UPLOADS - 1) + [201]
    assert {r.json()["number"] for r in responses} == {1}
    versions = uploader.get("/v1/adapters/acme/same-time/versions").json()["items"]
    assert [v["number"] for v in versions] == [1]


def test_different_concurrent_uploads_are_numbered_without_gaps(registry, tokens, uploader, base_model,
                                                                make_adapter):
    uploads = [files_of(make_adapter(seed=100 + i)) for i in range(UPLOADS)]

    responses = post_all(registry.url, tokens["acme_uploader"], "acme/many-at-once", uploads)

    assert [r.status_code for r in responses] == [201] * UPLOADS
    assert sorted(r.json()["number"] for r in responses) == list(range(1, UPLOADS + 1))
    assert len({r.json()["digest"] for r in responses}) == UPLOADS
    versions = uploader.get("/v1/adapters/acme/many-at-once/versions", params={"limit": 50}).json()
    assert [v["number"] for v in versions["items"]] == list(range(1, UPLOADS + 1))
