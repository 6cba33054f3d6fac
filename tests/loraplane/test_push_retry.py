"""`loraplane push` waits out a busy registry: on 429 (or 503) it waits as long as Retry-After
says, says so, and sends again, a bounded number of times. The registry here lets a tenant
upload one adapter at a time, and a stalled upload holds that one slot."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import closing
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from devkit import services
from loraplane_client.connection import RegistryError
from loraplane_client.push import push
from tests.support.metrics import wait_for_uploads

CONFIG, WEIGHTS = "adapter_config.json", "adapter_model.safetensors"
BAD_UPLOAD = [("file", (CONFIG, b'{"peft_type": "LORA"}')), ("file", (WEIGHTS, b"\0" * 16))]
BUSY = ("registry busy (HTTP 429: tenant 'acme' is already uploading 1 adapters at once, its share); "
        "sending again in 5 s")


@pytest.fixture(scope="module")
def one_at_a_time(service_dir: Path, registry: services.Service) -> services.Service:
    """A registry on the session's database, broker and bucket that lets a tenant upload one
    adapter at a time."""
    env = {key: value for key, value in registry.env.items() if key.startswith("LORAPLANE_")}
    env.pop("LORAPLANE_PUBLIC_URL", None)
    env.pop("LORAPLANE_DATA_DIR", None)
    server = services.start_registry(service_dir / "registry-one-at-a-time", {
        **env, "LORAPLANE_MAX_CONCURRENT_UPLOADS_PER_TENANT": "1"})
    yield server
    server.stop()


@pytest.fixture
def client(one_at_a_time: services.Service, tokens: dict[str, str]) -> httpx.Client:
    with httpx.Client(base_url=one_at_a_time.url, timeout=60,
                      headers={"Authorization": f"Bearer {tokens['acme_uploader']}"}) as client:
        yield client


@pytest.fixture
def admin_of(one_at_a_time: services.Service, tokens: dict[str, str]) -> httpx.Client:
    """A global admin's client of that registry, which reads its /metrics."""
    with httpx.Client(base_url=one_at_a_time.url, timeout=60,
                      headers={"Authorization": f"Bearer {tokens['global_admin']}"}) as admin:
        yield admin


def hold_the_slot(registry_url: str, token: str, client: httpx.Client,
                  admin: httpx.Client) -> socket.socket:
    """An upload whose body began and then stalled; returns once it holds acme's one slot."""
    address = urlsplit(registry_url)
    head = (f"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{WEIGHTS}\"\r\n\r\n"
            ).encode()
    sock = socket.create_connection((address.hostname, address.port))
    sock.sendall((f"POST /v1/adapters/acme/stalled/versions HTTP/1.1\r\nHost: {address.netloc}\r\n"
                  f"Authorization: Bearer {token}\r\nContent-Length: {1024 * 1024}\r\n"
                  "Content-Type: multipart/form-data; boundary=b\r\n\r\n").encode() + head + b"\0" * 1024)
    # Received before the probe, which would otherwise take the slot itself.
    wait_for_uploads(admin, "receiving", {"acme": 1})
    probe = client.post("/v1/adapters/acme/probe/versions", files=BAD_UPLOAD)
    assert probe.status_code == 429, probe.text
    return sock


def test_push_waits_for_the_slot_then_uploads(one_at_a_time, tokens, client, admin_of, make_adapter,
                                              base_model, capsys):
    folder = make_adapter(seed=41)
    stalled = hold_the_slot(one_at_a_time.url, tokens["acme_uploader"], client, admin_of)
    # The other upload ends a second later; push's first attempt is refused before that.
    threading.Timer(1.0, stalled.close).start()
    started = time.monotonic()

    version, created = push(client, folder, "acme", "retried", show_progress=False)

    assert created and version["served_name"] == "acme/retried@1"
    assert time.monotonic() - started >= 5  # it waited as Retry-After said
    assert f"{BUSY}, attempt 2 of 5" in capsys.readouterr().err


def test_push_gives_up_after_its_attempts_with_the_registrys_reason(
        one_at_a_time, tokens, client, admin_of, make_adapter, base_model, stored_state, capsys):
    folder = make_adapter(seed=42)
    before = stored_state()
    with closing(hold_the_slot(one_at_a_time.url, tokens["acme_uploader"], client, admin_of)):
        started = time.monotonic()
        with pytest.raises(RegistryError) as refused:
            push(client, folder, "acme", "given-up", show_progress=False, max_attempts=2)
        elapsed = time.monotonic() - started

    assert (refused.value.status, refused.value.code) == (429, "too_many_uploads")
    assert refused.value.message == "tenant 'acme' is already uploading 1 adapters at once, its share"
    assert 5 <= elapsed < 20
    err = capsys.readouterr().err
    assert err.count("registry busy") == 1 and f"{BUSY}, attempt 2 of 2" in err
    assert stored_state() == before
    assert client.get("/readyz").status_code == 200
