"""Probes, metrics, and what happens when the object store is down."""

from __future__ import annotations

import hashlib

import httpx
import pytest

from devkit import services
from registry.settings import MiB
from tests.conftest import BUCKET


def test_ready_when_database_and_storage_answer(registry):
    response = httpx.get(registry.url + "/readyz")
    assert response.status_code == 200
    assert response.json() == {"ready": True, "checks": {"database": "ok", "storage": "ok"}}


def test_metrics_count_requests_uploads_and_refusals_by_reason(admin, uploader, base_model):
    refused = uploader.post("/v1/adapters/acme/metered/versions",
                            files=[("file", ("adapter_model.bin", b"\x80\x04."))])
    assert refused.status_code == 415
    text = admin.get("/metrics").text
    assert 'loraplane_upload_refusals_total{reason="pickle_refused"}' in text
    assert 'loraplane_http_requests_total{method="POST",route="/v1/adapters/{tenant}/{name}/versions",' \
           'status="415"}' in text
    assert "loraplane_http_request_seconds_bucket" in text


@pytest.fixture(scope="module")
def registry_without_storage(service_dir, database_url):
    # A closed port stands in for an S3 endpoint that is down.
    server = services.start_registry(service_dir / "registry-no-s3", {
        "LORAPLANE_DATABASE_URL": database_url, "LORAPLANE_STORAGE": "s3",
        "LORAPLANE_S3_ENDPOINT_URL": f"http://127.0.0.1:{services.free_port()}",
        "LORAPLANE_S3_BUCKET": BUCKET,
    })
    yield server
    server.stop()


def test_not_ready_and_nothing_recorded_when_storage_is_down(registry_without_storage, tokens, base_model,
                                                             make_adapter, stored_state):
    url = registry_without_storage.url
    ready = httpx.get(url + "/readyz")
    assert ready.status_code == 503
    assert ready.json()["checks"]["database"] == "ok"
    assert ready.json()["checks"]["storage"].startswith("failed")

    folder = make_adapter(seed=61)
    weights = (folder / "adapter_model.safetensors").read_bytes()
    before = stored_state()
    # Once stored after validation, once streamed while arriving (the declared digest).
    for data in ({}, {"weights_sha256": hashlib.sha256(weights).hexdigest()}):
        response = httpx.post(
            url + "/v1/adapters/acme/no-storage/versions", timeout=120, data=data,
            headers={"Authorization": f"Bearer {tokens['acme_uploader']}"},
            files=[("file", (n, (folder / n).read_bytes()))
                   for n in ("adapter_config.json", "adapter_model.safetensors")])

        assert response.status_code == 503
        assert response.json()["error"]["code"] == "storage_unavailable"
        assert "Nothing was stored" in response.json()["error"]["hint"]
        assert stored_state() == before


def test_storage_failing_mid_stream_answers_503_and_records_nothing(service_dir, database_url, tokens,
                                                                   base_model, stored_state):
    """S3 goes away after the first part of a streamed upload has landed."""
    s3 = services.start_s3(service_dir / "s3-mid-stream")
    services.s3_client(s3.url).create_bucket(Bucket=BUCKET)
    registry = services.start_registry(service_dir / "registry-mid-stream", {
        "LORAPLANE_DATABASE_URL": database_url, "LORAPLANE_STORAGE": "s3",
        "LORAPLANE_S3_ENDPOINT_URL": s3.url, "LORAPLANE_S3_BUCKET": BUCKET,
        "LORAPLANE_MAX_UPLOAD_BYTES": str(64 * MiB),
    })
    weights = b"\0" * (40 * MiB)
    boundary = "mid-stream"

    def body():
        yield (f'--{boundary}\r\nContent-Disposition: form-data; name="weights_sha256"\r\n\r\n'
               f"{hashlib.sha256(weights).hexdigest()}\r\n"
               f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
               f'filename="adapter_model.safetensors"\r\n\r\n').encode()
        yield weights[: 20 * MiB]
        services.wait_until(lambda: _uploaded_parts(s3.url) >= 1, timeout_s=60, what="first part")
        s3.stop()
        yield weights[20 * MiB:]
        yield f"\r\n--{boundary}--\r\n".encode()

    try:
        before = stored_state()
        response = httpx.post(
            registry.url + "/v1/adapters/acme/mid-stream/versions", content=body(), timeout=300,
            headers={"Authorization": f"Bearer {tokens['acme_uploader']}",
                     "Content-Type": f"multipart/form-data; boundary={boundary}"})

        assert response.status_code == 503
        assert response.json()["error"]["code"] == "storage_unavailable"
        assert stored_state() == before
        assert httpx.get(registry.url + "/healthz").status_code == 200  # the registry lives on
    finally:
        registry.stop()
        s3.stop()


def _uploaded_parts(endpoint: str) -> int:
    client = services.s3_client(endpoint)
    uploads = client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])
    return sum(len(client.list_parts(Bucket=BUCKET, Key=u["Key"], UploadId=u["UploadId"]).get("Parts", []))
               for u in uploads)
