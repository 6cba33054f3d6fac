"""A registry process receives at most LORAPLANE_MAX_CONCURRENT_UPLOADS uploads at once (4 by
default), a tenant at most LORAPLANE_MAX_CONCURRENT_UPLOADS_PER_TENANT of them (3): beyond that
it answers 429 with Retry-After once the body begins, before spooling it, and stores nothing."""

from __future__ import annotations

import socket
from contextlib import ExitStack, closing
from urllib.parse import urlsplit

import httpx
import pytest

from devkit.services import wait_for
from tests.support.asserts import assert_refused
from tests.support.metrics import metric, wait_for_uploads

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


def refused_while_full(admin: httpx.Client, held: dict[str, int], client: httpx.Client,
                       adapter: str, files) -> httpx.Response:
    """Post an upload the registry would refuse anyway (a bad config) once the stalled uploads
    hold their slots (`held`, by tenant): a probe among them could take one's slot itself."""
    wait_for_uploads(admin, "receiving", held)
    return client.post(f"/v1/adapters/{adapter}/versions", files=files)


def wait_for_free_slots(admin: httpx.Client) -> None:
    """Stalled uploads give their slots back once the registry sees their clients hang up."""
    wait_for(lambda: metric(admin, "loraplane_uploads_in_progress", stage="receiving") == 0,
             timeout_s=20, what="every upload slot to be given back")


@pytest.fixture
def bad_upload(admin):
    files = [("file", (CONFIG, b'{"peft_type": "LORA"}')), ("file", (WEIGHTS, b"\0" * 16))]
    wait_for_free_slots(admin)
    yield files
    wait_for_free_slots(admin)  # leave every slot free for the tests that follow


def test_a_tenant_past_its_share_is_told_to_retry_and_nothing_is_stored(
        registry, tokens, client_for, admin, stored_state, bad_upload):
    before = stored_state()
    with ExitStack() as stalled:
        for index in range(3):
            stalled.enter_context(closing(start_slow_upload(registry.url, tokens["acme_uploader"],
                                                            f"acme/slow-{index}")))

        response = refused_while_full(admin, {"acme": 3}, client_for("acme_uploader"),
                                      "acme/one-more", bad_upload)

        assert_refused(response, 429, "too_many_uploads",
                       "tenant 'acme' is already uploading 3 adapters at once, its share")
        assert response.headers["Retry-After"] == "5"
        assert "LORAPLANE_MAX_CONCURRENT_UPLOADS_PER_TENANT" in response.json()["error"]["hint"]
        # Another tenant still has the process's fourth slot.
        other = client_for("globex_uploader").post("/v1/adapters/globex/other/versions", files=bad_upload)
        assert other.status_code == 422, other.text
    assert stored_state() == before
    assert client_for("acme_uploader").get("/readyz").status_code == 200


def test_the_process_past_its_limit_tells_everyone_to_retry(registry, tokens, client_for, admin,
                                                            stored_state, bad_upload):
    before = stored_state()
    with ExitStack() as stalled:
        for tenant, index in (("acme", 0), ("acme", 1), ("acme", 2), ("globex", 0)):
            stalled.enter_context(closing(start_slow_upload(registry.url, tokens[f"{tenant}_uploader"],
                                                            f"{tenant}/slow-{index}")))

        response = refused_while_full(admin, {"acme": 3, "globex": 1},
                                      client_for("globex_uploader"), "globex/one-more", bad_upload)

        assert_refused(response, 429, "too_many_uploads",
                       "this registry is already receiving 4 uploads, its limit")
        assert response.headers["Retry-After"] == "5"
    assert stored_state() == before


def test_slots_come_back_when_stalled_uploads_end(registry, tokens, client_for, admin, bad_upload):
    """A client that hangs up frees its slot: the next uploads are checked as usual."""
    with ExitStack() as stalled:
        for index in range(3):
            stalled.enter_context(closing(start_slow_upload(registry.url, tokens["acme_uploader"],
                                                            f"acme/slow-{index}")))
        assert refused_while_full(admin, {"acme": 3}, client_for("acme_uploader"), "acme/after",
                                  bad_upload).status_code == 429
    wait_for_free_slots(admin)
    response = client_for("acme_uploader").post("/v1/adapters/acme/after/versions", files=bad_upload)
    assert response.status_code == 422, response.text
