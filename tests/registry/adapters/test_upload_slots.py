"""A registry process receives at most LORAPLANE_MAX_CONCURRENT_UPLOADS uploads at once (4 by
default), a tenant at most LORAPLANE_MAX_CONCURRENT_UPLOADS_PER_TENANT of them (3): beyond that
it answers 429 with Retry-After once the body begins, before spooling it, and stores nothing."""

from __future__ import annotations

import socket
import time
from contextlib import ExitStack, closing
from urllib.parse import urlsplit

import httpx
import pytest

from tests.support.asserts import assert_refused

CONFIG, WEIGHTS = "adapter_config.json", "adapter_model.safetensors"


def start_slow_upload(registry_url: str, token: str, adapter: str) -> socket.socket:
    """An upload whose body has begun and then stalls, as over a slow link: it holds its slot."""
    address = urlsplit(registry_url)
    sock = socket.create_connection((address.hostname, address.port))
    boundary = "slow-upload"
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{WEIGHTS}\"\r\n\r\n"
            ).encode()
    sock.sendall((f"POST /v1/adapters/{adapter}/versions HTTP/1.1\r\nHost: {address.netloc}\r\n"
                  f"Authorization: Bearer {token}\r\nContent-Length: {1024 * 1024}\r\n"
                  f"Content-Type: multipart/form-data; boundary={boundary}\r\n\r\n").encode() + head + b"\0" * 1024)
    return sock


def refused_while_full(client: httpx.Client, adapter: str, files) -> httpx.Response:
    """Post an upload the registry would refuse anyway (a bad config) until the stalled uploads
    hold their slots: until then it gets its own 422, and nothing can be stored either way."""
    # The stalled uploads are received first: a probe among them could take one's slot itself.
    time.sleep(0.5)
    deadline = time.monotonic() + 20
    while True:
        response = client.post(f"/v1/adapters/{adapter}/versions", files=files)
        if response.status_code == 429 or time.monotonic() > deadline:
            return response
        assert response.status_code == 422, response.text
        time.sleep(0.1)


def wait_for_free_slots(client_for, files) -> None:
    """Stalled uploads give their slots back once the registry sees their clients hang up."""
    deadline = time.monotonic() + 20
    for tenant in ("acme", "globex"):
        while client_for(f"{tenant}_uploader").post(f"/v1/adapters/{tenant}/probe/versions",
                                                    files=files).status_code == 429:
            assert time.monotonic() < deadline, "the slots were never given back"
            time.sleep(0.1)


@pytest.fixture
def bad_upload(client_for):
    files = [("file", (CONFIG, b'{"peft_type": "LORA"}')), ("file", (WEIGHTS, b"\0" * 16))]
    wait_for_free_slots(client_for, files)
    yield files
    wait_for_free_slots(client_for, files)  # leave every slot free for the tests that follow


def test_a_tenant_past_its_share_is_told_to_retry_and_nothing_is_stored(
        registry, tokens, client_for, stored_state, bad_upload):
    before = stored_state()
    with ExitStack() as stalled:
        for index in range(3):
            stalled.enter_context(closing(start_slow_upload(registry.url, tokens["acme_uploader"],
                                                            f"acme/slow-{index}")))

        response = refused_while_full(client_for("acme_uploader"), "acme/one-more", bad_upload)

        assert_refused(response, 429, "too_many_uploads",
                       "tenant 'acme' is already uploading 3 adapters at once, its share")
        assert response.headers["Retry-After"] == "5"
        assert "LORAPLANE_MAX_CONCURRENT_UPLOADS_PER_TENANT" in response.json()["error"]["hint"]
        # Another tenant still has the process's fourth slot.
        other = client_for("globex_uploader").post("/v1/adapters/globex/other/versions", files=bad_upload)
        assert other.status_code == 422, other.text
    assert stored_state() == before
    assert client_for("acme_uploader").get("/readyz").status_code == 200


def test_the_process_past_its_limit_tells_everyone_to_retry(registry, tokens, client_for, stored_state,
                                                            bad_upload):
    before = stored_state()
    with ExitStack() as stalled:
        for tenant, index in (("acme", 0), ("acme", 1), ("acme", 2), ("globex", 0)):
            stalled.enter_context(closing(start_slow_upload(registry.url, tokens[f"{tenant}_uploader"],
                                                            f"{tenant}/slow-{index}")))

        response = refused_while_full(client_for("globex_uploader"), "globex/one-more", bad_upload)

        assert_refused(response, 429, "too_many_uploads",
                       "this registry is already receiving 4 uploads, its limit")
        assert response.headers["Retry-After"] == "5"
    assert stored_state() == before


def test_slots_come_back_when_stalled_uploads_end(registry, tokens, client_for, bad_upload):
    """A client that hangs up frees its slot: the next uploads are checked as usual."""
    with ExitStack() as stalled:
        for index in range(3):
            stalled.enter_context(closing(start_slow_upload(registry.url, tokens["acme_uploader"],
                                                            f"acme/slow-{index}")))
        assert refused_while_full(client_for("acme_uploader"), "acme/after", bad_upload).status_code == 429
    wait_for_free_slots(client_for, bad_upload)
    response = client_for("acme_uploader").post("/v1/adapters/acme/after/versions", files=bad_upload)
    assert response.status_code == 422, response.text
