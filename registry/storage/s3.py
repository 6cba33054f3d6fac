from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

import boto3
from boto3.exceptions import S3UploadFailedError
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from registry.errors import NotFound, Unavailable
from registry.settings import MiB, RegistrySettings
from registry.storage.base import BLOB_PREFIX

PART_SIZE = 16 * MiB
CHECKSUM = "CRC32"  # S3 checks every part, as boto3's own transfers do
TRANSFER = TransferConfig(multipart_threshold=64 * MiB, multipart_chunksize=PART_SIZE, max_concurrency=4)


@contextlib.contextmanager
def storage_errors():
    """Turn an S3 failure into a 503 that says nothing was stored, and a missing object into
    a 404."""
    try:
        yield
    except ClientError as error:
        # A missing object will not appear on a retry: say so, as the local store does.
        if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            raise NotFound("artifact not found", code="artifact_not_found") from error
        raise _unavailable(error) from error
    except (BotoCoreError, S3UploadFailedError) as error:
        raise _unavailable(error) from error


def _unavailable(error: Exception) -> Unavailable:
    return Unavailable(f"artifact storage failed: {type(error).__name__}", code="storage_unavailable",
                       hint="Nothing was stored. Retry the upload; if it keeps failing, check /readyz.")


def _client(settings: RegistrySettings, endpoint_url: str | None):
    return boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=settings.s3_region,
        config=Config(
            # SigV4 always: S3 refuses any other signature on an SSE-KMS object, presigned GETs
            # included (which need nothing else: S3 decrypts for whoever may read).
            signature_version="s3v4",
            retries={"mode": "standard", "max_attempts": 5},
            connect_timeout=5,
            read_timeout=60,
            s3={"addressing_style": settings.s3_addressing_style},
            max_pool_connections=16,
        ),
    )


def encryption_args(settings: RegistrySettings) -> dict[str, str]:
    """What every write asks S3 for (PutObject, CreateMultipartUpload, upload_file's ExtraArgs):
    the same names in each."""
    if settings.s3_sse == "none":
        return {}
    args: dict[str, str] = {"ServerSideEncryption": settings.s3_sse}
    if settings.s3_sse_kms_key_id is not None:
        args["SSEKMSKeyId"] = settings.s3_sse_kms_key_id
    return args


class S3Store:
    def __init__(self, settings: RegistrySettings) -> None:
        self.bucket = settings.s3_bucket
        self.client = _client(settings, settings.s3_endpoint_url)
        self.encryption = encryption_args(settings)
        # Signing makes no request: this client only signs URLs for the address nodes reach,
        # which is the operator's setting, never anything a request said (a Host header).
        self.presigner = (self.client if settings.s3_presign_endpoint_url is None
                          else _client(settings, settings.s3_presign_endpoint_url))

    def has(self, key: str) -> bool:
        with storage_errors():
            try:
                self.client.head_object(Bucket=self.bucket, Key=key)
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                    return False
                raise
        return True

    def put_file(self, key: str, path: Path) -> None:
        if not self.has(key):
            with storage_errors():
                self.client.upload_file(str(path), self.bucket, key, Config=TRANSFER,
                                        ExtraArgs=self.encryption or None)

    def put_bytes(self, key: str, data: bytes) -> None:
        if not self.has(key):
            with storage_errors():
                self.client.put_object(Bucket=self.bucket, Key=key, Body=data, **self.encryption)

    def get_bytes(self, key: str) -> bytes:
        with storage_errors():
            return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()

    def get_file(self, key: str, path: Path) -> None:
        staging = path.with_name(f".{path.name}.partial")
        try:
            with storage_errors():
                self.client.download_file(self.bucket, key, str(staging), Config=TRANSFER)
            os.replace(staging, path)
        finally:
            staging.unlink(missing_ok=True)

    def begin_write(self, key: str) -> S3MultipartWriter:
        with storage_errors():
            upload = self.client.create_multipart_upload(Bucket=self.bucket, Key=key,
                                                         ChecksumAlgorithm=CHECKSUM, **self.encryption)
        return S3MultipartWriter(self.client, self.bucket, key, upload["UploadId"])

    def presigned_url(self, key: str, ttl_s: int) -> str:
        return self.presigner.generate_presigned_url(
            "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=ttl_s
        )

    def check(self) -> None:
        self.client.head_bucket(Bucket=self.bucket)

    def list_blobs(self) -> Iterator[tuple[str, datetime]]:
        with storage_errors():
            for page in self.client.get_paginator("list_objects_v2").paginate(
                    Bucket=self.bucket, Prefix=BLOB_PREFIX):
                for item in page.get("Contents", []):
                    sha256 = item["Key"].rsplit("/", 1)[-1]
                    if item["Key"] == f"{BLOB_PREFIX}{sha256[:2]}/{sha256}":
                        yield sha256, item["LastModified"]

    def delete(self, key: str) -> None:
        with storage_errors():  # S3 answers 204 for a key that is not there
            self.client.delete_object(Bucket=self.bucket, Key=key)


class S3MultipartWriter:
    """An S3 multipart upload: parts may arrive in any order; the object appears on complete."""

    part_size = PART_SIZE

    def __init__(self, client, bucket: str, key: str, upload_id: str) -> None:
        self.client, self.bucket, self.key, self.upload_id = client, bucket, key, upload_id
        self.parts: dict[int, dict] = {}

    def upload_part(self, number: int, data: BinaryIO) -> None:
        with storage_errors():
            response = self.client.upload_part(Bucket=self.bucket, Key=self.key, UploadId=self.upload_id,
                                               PartNumber=number, Body=data, ChecksumAlgorithm=CHECKSUM)
        part = {"PartNumber": number, "ETag": response["ETag"]}
        if "ChecksumCRC32" in response:  # some S3-compatible servers do not echo it
            part["ChecksumCRC32"] = response["ChecksumCRC32"]
        self.parts[number] = part

    def complete(self) -> None:
        parts = [self.parts[number] for number in sorted(self.parts)]
        with storage_errors():
            self.client.complete_multipart_upload(Bucket=self.bucket, Key=self.key, UploadId=self.upload_id,
                                                  MultipartUpload={"Parts": parts})

    def abort(self) -> None:
        # Best effort: an upload left behind is invisible, and a bucket lifecycle rule
        # (AbortIncompleteMultipartUpload) removes its parts.
        with contextlib.suppress(BotoCoreError, ClientError):
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=self.key, UploadId=self.upload_id)
