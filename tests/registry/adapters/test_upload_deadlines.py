"""A client that sends an upload's body too slowly, or not at all, is answered 408 and holds
nothing: a registry whose LORAPLANE_UPLOAD_IDLE_TIMEOUT_S is 2 s and whose minimum rate
(LORAPLANE_UPLOAD_MIN_BYTES_PER_S) is 1000 bytes/s, against real sockets that stall.

Before these bounds, 4 sockets that sent only the headers of an upload with Content-Length:
5000000 held every upload slot of the process for as long as they stayed open, and every
other tenant's upload was answered 429.
"""

from __future__ import annotations

import json
import select
import socket
import time
from contextlib import ExitStack, closing
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from devkit import services
from tests.support.metrics import wait_for_uploads

IDLE_S, MIN_RATE = 2, 1000
CONFIG, WEIGHTS = "adapter_config.json", "adapter_model.safetensors"
BAD_UPLOAD = [("file", (CONFIG, b'{"peft_type": "LORA"}')), ("file", (WEIGHTS, b"\0" * 16))]
BOUNDARY = "stalled-upload"
PART_HEAD = (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; "
             f"filename=\"{WEIGHTS}\"\r\n\r\n").encode()


@pytest.fixture(scope="module")
def impatient(service_dir: Path, registry: services.Service) -> services.Service:
    """A registry on the session's database, broker and bucket, with short receive bounds."""
    env = {key: value for key, value in registry.env.items() if key.startswith("LORAPLANE_")}
    env.pop("LORAPLANE_PUBLIC_URL", None)
    env.pop("LORAPLANE_DATA_DIR", None)
    server = services.start_registry(service_dir / "registry-impatient", {
        **env, "LORAPLANE_UPLOAD_IDLE_TIMEOUT_S": str(IDLE_S),
        "LORAPLANE_UPLOAD_MIN_BYTES_PER_S": str(MIN_RATE)})
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client_of(impatient: services.Service, tokens: dict[str, str]):
    clients: dict[str, httpx.Client] = {}

    def make(principal: str) -> httpx.Client:
        if principal not in clients:
            clients[principal] = httpx.Client(base_url=impatient.url, timeout=60, headers={
                "Authorization": f"Bearer {tokens[principal]}"})
        return clients[principal]

    yield make
    for client in clients.values():
        client.close()


def open_upload(registry_url: str, token: str, adapter: str, body: bytes = b"",
                content_length: int = 5_000_000) -> socket.socket:
    """Send an upload's request headers, declaring content_length bytes, then `body` only."""
    address = urlsplit(registry_url)
    sock = socket.create_connection((address.hostname, address.port))
    sock.sendall((f"POST /v1/adapters/{adapter}/versions HTTP/1.1\r\nHost: {address.netloc}\r\n"
                  f"Authorization: Bearer {token}\r\nContent-Length: {content_length}\r\n"
                  f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n\r\n").encode() + body)
    return sock


def read_answer(sock: socket.socket, timeout_s: float = 15) -> tuple[int, dict[str, str], dict, bool]:
    """Status, headers, JSON body, and whether the registry then closed the connection."""
    sock.settimeout(timeout_s)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "the connection closed without an answer"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    while len(rest) < int(headers["content-length"]):
        rest += sock.recv(65536)
    try:
        closed = sock.recv(1) == b""
    except ConnectionResetError:
        closed = True
    except TimeoutError:
        closed = False
    return int(lines[0].split()[1]), headers, json.loads(rest), closed


def assert_timed_out(answer, message: str) -> None:
    status, headers, body, closed = answer
    assert status == 408, body
    assert body["error"]["code"] == "upload_timeout"
    assert message in body["error"]["message"]
    assert "steadier connection" in body["error"]["hint"]
    assert headers["connection"] == "close"
    assert closed, "the registry kept the connection of an upload it stopped reading"


def spool_is_empty(impatient: services.Service) -> bool:
    spool = Path(impatient.env["LORAPLANE_DATA_DIR"]) / "spool"
    return not spool.exists() or not any(spool.iterdir())


def test_sockets_that_send_only_headers_hold_no_slot_and_are_answered_408(
        impatient, tokens, client_of, stored_state):
    before = stored_state()
    with ExitStack() as stalled:
        sockets = [stalled.enter_context(closing(open_upload(impatient.url, tokens[f"{tenant}_uploader"],
                                                             f"{tenant}/x")))
                   for tenant in ("acme", "acme", "acme", "globex")]
        opened = time.monotonic()
        # The registry has read all four requests' headers and waits for their bodies.
        wait_for_uploads(client_of("global_admin"), "awaiting_body", {"acme": 3, "globex": 1})

        # Every tenant is still served: its upload is checked (and refused for its bad config).
        for tenant in ("globex", "acme"):
            response = client_of(f"{tenant}_uploader").post(f"/v1/adapters/{tenant}/other/versions",
                                                             files=BAD_UPLOAD)
            assert response.status_code == 422, response.text

        for sock in sockets:
            assert_timed_out(read_answer(sock), f"the upload sent nothing for {IDLE_S} s after 0 bytes "
                             "of its body; the registry stops waiting after LORAPLANE_UPLOAD_IDLE_TIMEOUT_S")
        assert time.monotonic() - opened < IDLE_S + 5
    assert stored_state() == before
    assert spool_is_empty(impatient)
    assert client_of("acme_uploader").get("/readyz").status_code == 200


def test_a_body_that_stops_midway_frees_its_slot_and_spool(impatient, tokens, client_of, stored_state):
    """Three stalled bodies hold acme's three slots (429 meanwhile) until their 408."""
    before = stored_state()
    with ExitStack() as stalled:
        sockets = [stalled.enter_context(closing(open_upload(
            impatient.url, tokens["acme_uploader"], f"acme/slow-{index}", PART_HEAD + b"\0" * 1000)))
            for index in range(3)]
        wait_for_uploads(client_of("global_admin"), "receiving", {"acme": 3})
        busy = client_of("acme_uploader").post("/v1/adapters/acme/other/versions", files=BAD_UPLOAD)
        assert busy.status_code == 429, busy.text

        for sock in sockets:
            assert_timed_out(read_answer(sock), f"the upload sent nothing for {IDLE_S} s after "
                             f"{len(PART_HEAD) + 1000} bytes of its body")

        after = client_of("acme_uploader").post("/v1/adapters/acme/other/versions", files=BAD_UPLOAD)
        assert after.status_code == 422, after.text
    assert stored_state() == before
    assert spool_is_empty(impatient)
    assert client_of("acme_uploader").get("/readyz").status_code == 200


def test_a_body_that_trickles_below_the_minimum_rate_is_refused(impatient, tokens, client_of,
                                                                stored_state):
    """A byte every half second never leaves the connection idle for 2 s, but averages 2 bytes/s."""
    before = stored_state()
    with closing(open_upload(impatient.url, tokens["acme_uploader"], "acme/trickle", PART_HEAD)) as sock:
        started = time.monotonic()
        # A byte every half second until the answer is there to read (or 8 s went by).
        while not select.select([sock], [], [], 0.5)[0] and time.monotonic() - started < IDLE_S + 6:
            sock.sendall(b"\0")
        answer = read_answer(sock)
        elapsed = time.monotonic() - started

    assert_timed_out(answer, f"below the minimum of {MIN_RATE} bytes/s (LORAPLANE_UPLOAD_MIN_BYTES_PER_S)")
    assert elapsed < IDLE_S + 3  # the rate bound, not the idle one, ended it
    assert stored_state() == before
    assert spool_is_empty(impatient)
    assert client_of("acme_uploader").get("/readyz").status_code == 200


def test_an_upload_at_full_speed_is_accepted(client_of, make_adapter, base_model):
    """Guards the bounds: a real adapter sent at once is received and stored as usual."""
    folder = make_adapter(seed=5)
    files = [("file", (name, (folder / name).read_bytes())) for name in (CONFIG, WEIGHTS)]
    response = client_of("acme_uploader").post("/v1/adapters/acme/on-time/versions", files=files)
    assert response.status_code == 201, response.text
