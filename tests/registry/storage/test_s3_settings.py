"""S3 as companies run it, on the real S3 API (moto_server): every write asks for server-side
encryption with the configured KMS key, multipart uploads included; download URLs are signed for
the address nodes reach, which may differ from the registry's own; virtual-hosted addressing
puts the bucket in the host. Combinations that cannot work are refused at start, naming the
setting."""

from __future__ import annotations

import io
import secrets
from urllib.parse import urlsplit

import boto3
import httpx
import pytest
from pydantic import ValidationError

from devkit import services
from registry.settings import RegistrySettings
from registry.storage.s3 import S3Store
from tests.support.names import BUCKET


@pytest.fixture
def credentials(monkeypatch):
    for name, value in services.S3_CREDENTIALS.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(scope="module")
def kms_key(s3) -> str:
    """A KMS key on the same moto server (it serves every AWS API on one port)."""
    kms = boto3.client("kms", endpoint_url=s3.url, **_boto_credentials())
    return kms.create_key(Description="loraplane artifacts")["KeyMetadata"]["Arn"]


def _boto_credentials() -> dict[str, str]:
    return {"region_name": "us-east-1", "aws_access_key_id": "test", "aws_secret_access_key": "test"}


def store(s3, **settings) -> S3Store:
    return S3Store(RegistrySettings(storage="s3", s3_endpoint_url=s3.url, s3_bucket=BUCKET, **settings))


def key() -> str:
    return f"test-s3-settings/{secrets.token_hex(8)}"


def write_every_way(target: S3Store, tmp_path) -> list[str]:
    """One object per way the registry writes: put_bytes, put_file, and a streamed multipart upload."""
    keys = [key(), key(), key()]
    target.put_bytes(keys[0], b"suite rows")
    (tmp_path / "weights").write_bytes(b"weights" * 100)
    target.put_file(keys[1], tmp_path / "weights")
    writer = target.begin_write(keys[2])
    writer.upload_part(1, io.BytesIO(b"streamed part"))
    writer.complete()
    return keys


def test_every_write_carries_the_kms_key(s3, s3_client, credentials, kms_key, tmp_path):
    target = store(s3, s3_sse="aws:kms", s3_sse_kms_key_id=kms_key)

    for written in write_every_way(target, tmp_path):
        head = s3_client.head_object(Bucket=BUCKET, Key=written)
        assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", kms_key), written
    # A presigned GET needs nothing but SigV4, which every URL is signed with.
    url = target.presigned_url(written, 60)
    assert "X-Amz-Algorithm=AWS4-HMAC-SHA256" in url
    assert httpx.get(url).content == b"streamed part"


def test_aes256_and_none_ask_for_what_they_say(s3, s3_client, credentials, tmp_path):
    for written in write_every_way(store(s3, s3_sse="AES256"), tmp_path):
        assert s3_client.head_object(Bucket=BUCKET, Key=written)["ServerSideEncryption"] == "AES256"
    plain = key()
    store(s3).put_bytes(plain, b"x")
    assert "SSEKMSKeyId" not in s3_client.head_object(Bucket=BUCKET, Key=plain)


def test_download_urls_carry_the_presign_endpoint_and_still_download(s3, credentials):
    # The registry reaches moto at 127.0.0.1; nodes are handed URLs for "localhost", the same
    # server by another name: signed for that host, and answered there.
    port = urlsplit(s3.url).port
    target = store(s3, s3_presign_endpoint_url=f"http://localhost:{port}")
    written = key()
    target.put_bytes(written, b"adapter bytes")

    url = target.presigned_url(written, 60)

    assert urlsplit(url).netloc == f"localhost:{port}"
    assert urlsplit(url).path == f"/{BUCKET}/{written}"
    assert httpx.get(url).content == b"adapter bytes"
    assert urlsplit(store(s3).presigned_url(written, 60)).netloc == f"127.0.0.1:{port}"


def test_virtual_addressing_puts_the_bucket_in_the_host(s3, credentials):
    port = urlsplit(s3.url).port
    target = store(s3, s3_addressing_style="virtual", s3_presign_endpoint_url=f"http://localhost:{port}")
    written = key()
    target.put_bytes(written, b"virtually")  # moto routes the bucket-in-host request it is sent

    url = target.presigned_url(written, 60)

    assert urlsplit(url).netloc == f"{BUCKET}.localhost:{port}"
    assert urlsplit(url).path == f"/{written}"
    # "<bucket>.localhost" need not resolve here (no wildcard DNS): connect to the server's address
    # and send the signed Host, as a resolver pointing the name there would.
    direct = urlsplit(url)._replace(netloc=f"127.0.0.1:{port}").geturl()
    assert httpx.get(direct, headers={"Host": f"{BUCKET}.localhost:{port}"}).content == b"virtually"


@pytest.mark.fast
@pytest.mark.parametrize(("settings", "message"), [
    ({"s3_sse": "aws:kms", "s3_sse_kms_key_id": "k", "storage": "local"},
     "LORAPLANE_S3_SSE, LORAPLANE_S3_SSE_KMS_KEY_ID configure S3, but LORAPLANE_STORAGE is 'local'"),
    ({"s3_presign_endpoint_url": "https://s3.example.com", "storage": "local"},
     "LORAPLANE_S3_PRESIGN_ENDPOINT_URL configure S3, but LORAPLANE_STORAGE is 'local'"),
    ({"s3_sse_kms_key_id": "arn:aws:kms:us-east-1:1:key/k"},
     "LORAPLANE_S3_SSE_KMS_KEY_ID is set but LORAPLANE_S3_SSE is 'none'"),
    ({"s3_sse": "AES256", "s3_sse_kms_key_id": "arn:aws:kms:us-east-1:1:key/k"},
     "S3 takes a KMS key only with LORAPLANE_S3_SSE=aws:kms"),
    ({"s3_sse": "aws:kms", "s3_sse_kms_key_id": "key id\n"}, "LORAPLANE_S3_SSE_KMS_KEY_ID holds spaces"),
    ({"s3_sse": "aws:kms:dsse"}, "s3_sse"),
    ({"s3_addressing_style": "subdomain"}, "s3_addressing_style"),
    ({"s3_presign_endpoint_url": "s3.example.com"}, "LORAPLANE_S3_PRESIGN_ENDPOINT_URL must be an http or https URL"),
    ({"s3_presign_endpoint_url": "ftp://s3.example.com"}, "must be an http or https URL with a host"),
    ({"s3_presign_endpoint_url": "https://user:secret@s3.example.com"}, "no credentials, query or fragment"),
    ({"s3_presign_endpoint_url": "https://s3.example.com/?x-id=1"}, "no credentials, query or fragment"),
    ({"s3_presign_endpoint_url": "https://s3.example.com:port"}, "is not a URL"),
    ({"s3_addressing_style": "virtual", "s3_bucket": "my.artifacts"},
     "LORAPLANE_S3_ADDRESSING_STYLE=virtual puts the bucket in the host name"),
    ({"s3_addressing_style": "virtual", "s3_bucket": "Artifacts_1"}, "is not one label of a host name"),
])
def test_a_combination_that_cannot_work_is_refused_at_start_naming_the_setting(settings, message, tmp_path):
    with pytest.raises(ValidationError) as refused:
        RegistrySettings(**{"storage": "s3", "data_dir": tmp_path, **settings})
    assert message in str(refused.value)


@pytest.mark.fast
def test_the_settings_are_read_from_loraplane_variables(monkeypatch, tmp_path):
    for name, value in {"STORAGE": "s3", "S3_PRESIGN_ENDPOINT_URL": "https://s3.internal:9000",
                        "S3_ADDRESSING_STYLE": "virtual", "S3_SSE": "aws:kms",
                        "S3_SSE_KMS_KEY_ID": "alias/loraplane", "DATA_DIR": str(tmp_path)}.items():
        monkeypatch.setenv(f"LORAPLANE_{name}", value)
    settings = RegistrySettings()
    assert (settings.s3_presign_endpoint_url, settings.s3_addressing_style, settings.s3_sse,
            settings.s3_sse_kms_key_id) == ("https://s3.internal:9000", "virtual", "aws:kms", "alias/loraplane")
