"""Creating a webhook that points inside is refused with the reason, in every form an address can
be written in, and for names that resolve inside. The registry here allows no network at all
(the session's registry allows loopback for the tests' receivers)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import httpx
import pytest

from devkit import services
from tests.support.asserts import assert_refused


@pytest.fixture(scope="module")
def strict_admin(service_dir, registry, tokens) -> Iterator[httpx.Client]:
    env = {key: value for key, value in registry.env.items() if key.startswith("LORAPLANE_")}
    env.pop("LORAPLANE_PUBLIC_URL", None)
    env.pop("LORAPLANE_DATA_DIR", None)
    env["LORAPLANE_WEBHOOK_ALLOWED_NETWORKS"] = "[]"
    server = services.start_registry(service_dir / "registry-strict-webhooks", env)
    client = httpx.Client(base_url=server.url, timeout=60,
                          headers={"Authorization": f"Bearer {tokens['global_admin']}"})
    yield client
    client.close()
    server.stop()


HOST = socket.gethostname()  # /etc/hosts resolves it to loopback here


@pytest.mark.parametrize(("url", "message"), [
    ("http://100.64.0.1/hook", "100.64.0.1 is an internal address"),
    ("http://100.100.100.200/latest/meta-data", "100.100.100.200 is an internal address"),
    ("http://[::ffff:127.0.0.1]:8080/hook", "::ffff:7f00:1 is an internal address (it reaches 127.0.0.1)"),
    ("http://[::ffff:169.254.169.254]/latest",
     "::ffff:a9fe:a9fe is an internal address (it reaches 169.254.169.254)"),
    ("http://0.0.0.0:8080/hook", "0.0.0.0 is an internal address"),
    ("http://[::]:8080/hook", ":: is an internal address"),
    ("http://169.254.169.254/computeMetadata/v1/", "169.254.169.254 is an internal address"),
    ("http://0xa9fea9fe/latest", "169.254.169.254 is an internal address"),  # written in hex
    ("http://[64:ff9b::10.0.0.1]/hook", "64:ff9b::a00:1 is an internal address (it reaches 10.0.0.1)"),
    ("http://[2002:a00:1::]/hook", "2002:a00:1:: is an internal address (it embeds 10.0.0.1)"),
    ("http://224.0.0.251/hook", "224.0.0.251 is an internal address"),
    ("http://127.0.0.1:5432/", "127.0.0.1 is an internal address"),
    # Names that resolve inside, as metadata.google.internal does on a cloud VM:
    ("http://localhost:8080/hook", "localhost resolves to an internal address"),
    (f"http://{HOST}:8080/hook", f"{HOST} resolves to an internal address"),
])
def test_a_webhook_to_an_internal_address_is_refused(strict_admin, url, message):
    before = strict_admin.get("/v1/webhooks").json()

    response = strict_admin.post("/v1/webhooks", json={"url": url})

    assert_refused(response, 422, "internal_webhook_url", f"webhook URL refused: {message}")
    assert response.json()["error"]["message"] == f"webhook URL refused: {message}"
    assert "LORAPLANE_WEBHOOK_ALLOWED_NETWORKS" in response.json()["error"]["hint"]
    assert strict_admin.get("/v1/webhooks").json() == before
    assert strict_admin.get("/readyz").status_code == 200


def test_only_a_globally_routable_address_is_accepted(strict_admin):
    before = strict_admin.get("/v1/webhooks").json()
    # 203.0.113.0/24 is kept for documentation: no receiver lives there.
    assert_refused(strict_admin.post("/v1/webhooks", json={"url": "https://203.0.113.9/hook"}),
                   422, "internal_webhook_url", "webhook URL refused: 203.0.113.9 is an internal address")
    assert strict_admin.get("/v1/webhooks").json() == before

    created = strict_admin.post("/v1/webhooks", json={"url": "https://8.8.8.8/hook",
                                                      "events": ["promotion.rejected"]})

    assert created.status_code == 201, created.text
    assert strict_admin.delete(f"/v1/webhooks/{created.json()['id']}").status_code == 204
    assert strict_admin.get("/readyz").status_code == 200
