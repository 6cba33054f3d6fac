"""Download links on the embedded store: signed with a key of their own, only for
content-addressed blobs, never living longer than a week, and never written to the access log.
The anonymous CSRF token, once an oracle over the same key, can no longer forge one."""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from devkit import services
from devkit.pipeline_steps import upload_dir
from tests.support.asserts import assert_refused


@pytest.fixture(scope="module")
def local_registry(service_dir, database_url, redis):
    """A registry on the embedded store (a local folder), on the session's database."""
    server = services.start_registry(service_dir / "registry-local-store", {
        "LORAPLANE_DATABASE_URL": database_url, "LORAPLANE_BROKER_URL": redis.url,
        "LORAPLANE_STORAGE": "local"})
    yield server
    server.stop()


@pytest.fixture(scope="module")
def link(local_registry, tokens, base_model, make_adapter):
    uploader = httpx.Client(base_url=local_registry.url, timeout=60,
                            headers={"Authorization": f"Bearer {tokens['acme_uploader']}"})
    version = upload_dir(uploader, "acme/linked", make_adapter(seed=77))
    download = uploader.get(f"/v1/adapters/acme/linked/versions/{version['number']}/download").json()
    weights = next(f for f in download["files"] if f["name"].endswith(".safetensors"))
    return {"url": weights["url"], "sha256": weights["sha256"]}


def parts(url: str) -> tuple[str, int, str]:
    split = urlsplit(url)
    query = parse_qs(split.query)
    return split.path.removeprefix("/v1/artifacts/"), int(query["expires"][0]), query["signature"][0]


def test_a_genuine_link_downloads_the_blob(local_registry, link):
    response = httpx.get(link["url"])
    assert response.status_code == 200
    assert hashlib.sha256(response.content).hexdigest() == link["sha256"]


def test_the_anonymous_csrf_token_cannot_be_turned_into_a_download_link(local_registry, link):
    """The attack that worked: a crafted anonymous nonce made the sign-in form sign
    'csrf:/../blobs/...\\n<expiry>' under the download key; the path resolved the '..'."""
    key, _, _ = parts(link["url"])
    expires = int(time.time()) + 10**12
    crafted = f'"/../{key}\\012{expires}"'
    form = httpx.get(local_registry.url + "/ui/sign-in", cookies={"loraplane_visit": crafted}).text
    oracle = re.search(r'name="csrf_token" value="([0-9a-f]{64})"', form).group(1)

    forged = httpx.get(f"{local_registry.url}/v1/artifacts/csrf:/../{key}",
                       params={"expires": expires, "signature": oracle})

    assert_refused(forged, 403, "bad_signature", "the download link is invalid or has expired")
    assert httpx.get(local_registry.url + "/readyz").status_code == 200


def test_a_link_signed_for_too_long_or_for_a_path_is_refused(local_registry, link):
    from registry.keys import Purpose, _derive

    secret = local_registry.env["LORAPLANE_SECRET_KEY"].encode()
    signing_key = _derive(secret, Purpose.DOWNLOAD_LINKS)  # the registry's own key: a valid signature

    def signed(key: str, expires: int) -> httpx.Response:
        signature = hmac.new(signing_key, f"{key}\n{expires}".encode(), hashlib.sha256).hexdigest()
        return httpx.get(f"{local_registry.url}/v1/artifacts/{key}",
                         params={"expires": expires, "signature": signature})

    key, _, _ = parts(link["url"])
    assert signed(key, int(time.time()) + 600).status_code == 200  # the check itself is sound
    for refused in (signed(key, int(time.time()) + 8 * 24 * 3600),  # a week is the most
                    signed(f"blobs/../{key}", int(time.time()) + 600),
                    signed(f"blobs/sha256/ff/{key[-64:]}", int(time.time()) + 600),  # wrong fan-out
                    signed("secret.key", int(time.time()) + 600)):
        assert_refused(refused, 403, "bad_signature", "the download link is invalid or has expired")


def test_the_access_log_never_holds_a_signature(local_registry, link):
    _, _, signature = parts(link["url"])
    assert httpx.get(link["url"]).status_code == 200
    log = local_registry.log.read_text()
    assert "/v1/artifacts/blobs/sha256/" in log and "signature=[redacted]" in log
    assert signature not in log
