from __future__ import annotations

from pathlib import Path

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from boto3.exceptions import S3UploadFailedError
from botocore.exceptions import BotoCoreError, ClientError

from registry.errors import Unavailable
from registry.settings import MiB, RegistrySettings

TRANSFER = TransferConfig(multipart_threshold=64 * MiB, multipart_chunksize=16 * MiB, max_concurrency=4)


class S3Store:
    def __init__(self, settings: RegistrySettings) -> None:
        self.bucket = settings.s3_bucket
        self.client = boto3.client(
            "s3",
            endpoint_url=settings.s3_endpoint_url,
            region_name=settings.s3_region,
            config=Config(
                signature_version="s3v4",
                retries={"mode": "standard", "max_attempts": 5},
                connect_timeout=5,
                read_timeout=60,
                s3={"addressing_style": "path"},
            ),
        )

    def put_file(self, key: str, path: Path) -> None:
        try:
            if not self._exists(key):
                self.client.upload_file(str(path), self.bucket, key, Config=TRANSFER)
        except (BotoCoreError, ClientError, S3UploadFailedError) as error:
            raise Unavailable(
                f"artifact storage failed: {type(error).__name__}",
                code="storage_unavailable",
                hint="Nothing was stored. Retry the upload; if it keeps failing, check /readyz.",
            ) from error

    def presigned_url(self, key: str, ttl_s: int) -> str:
        return self.client.generate_presigned_url(
            "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=ttl_s
        )

    def check(self) -> None:
        self.client.head_bucket(Bucket=self.bucket)

    def _exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True
