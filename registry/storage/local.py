"""A folder of artifacts for the embedded default, with HMAC-signed download URLs."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlencode

from registry.errors import Forbidden, NotFound, Unavailable
from registry import keys
from registry.keys import Purpose
from registry.settings import MAX_PRESIGN_TTL_S, RegistrySettings
from registry.storage.base import BLOB_PREFIX

DOWNLOAD_ROUTE = "/v1/artifacts/"
# Only content-addressed blobs are ever downloaded: a key is never a path a caller can steer.
DOWNLOADABLE_KEY = re.compile(r"blobs/sha256/([0-9a-f]{2})/\1[0-9a-f]{62}")


class LocalStore:
    def __init__(self, settings: RegistrySettings) -> None:
        self.root = settings.artifacts_dir
        self.public_url = settings.public_url.rstrip("/")

    def has(self, key: str) -> bool:
        return self.path_of(key).is_file()

    def put_file(self, key: str, path: Path) -> None:
        with open(path, "rb") as source:
            self._write(key, lambda staging: shutil.copyfileobj(source, staging, 1024 * 1024))

    def put_bytes(self, key: str, data: bytes) -> None:
        self._write(key, lambda staging: staging.write(data))

    def get_bytes(self, key: str) -> bytes:
        return self._existing(key).read_bytes()

    def get_file(self, key: str, path: Path) -> None:
        staging = path.with_name(f".{path.name}.partial")
        try:
            shutil.copyfile(self._existing(key), staging)
            os.replace(staging, path)
        finally:
            staging.unlink(missing_ok=True)

    def _existing(self, key: str) -> Path:
        path = self.path_of(key)
        if not path.is_file():
            raise NotFound("artifact not found", code="artifact_not_found")
        return path

    def begin_write(self, key: str) -> None:
        return None

    def _write(self, key: str, fill) -> None:
        target = self.path_of(key)
        if target.exists():
            return
        staging = None
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as staging:
                fill(staging)
            os.replace(staging.name, target)  # atomic: readers never see a partial blob
        except OSError as error:
            if staging is not None:
                Path(staging.name).unlink(missing_ok=True)
            raise Unavailable(f"artifact storage failed: {error.strerror or type(error).__name__}",
                              code="storage_unavailable",
                              hint="Nothing was stored. Check the registry's disk, then retry.") from error

    def presigned_url(self, key: str, ttl_s: int) -> str:
        expires = int(time.time()) + ttl_s
        query = urlencode({"expires": expires, "signature": self._sign(key, expires)})
        return f"{self.public_url}{DOWNLOAD_ROUTE}{key}?{query}"

    def open_signed(self, key: str, expires: int, signature: str) -> Path:
        now = time.time()
        if (not DOWNLOADABLE_KEY.fullmatch(key) or not now <= expires <= now + MAX_PRESIGN_TTL_S
                or not keys.verifies(Purpose.DOWNLOAD_LINKS, _link(key, expires), signature)):
            raise Forbidden("the download link is invalid or has expired", code="bad_signature",
                            hint="Ask the registry for a new download URL.")
        return self._existing(key)

    def check(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if not os.access(self.root, os.W_OK):
            raise OSError(f"{self.root} is not writable")

    def list_blobs(self) -> Iterator[tuple[str, datetime]]:
        folder = self.root / BLOB_PREFIX
        for path in folder.glob("*/*") if folder.is_dir() else ():
            key = f"{BLOB_PREFIX}{path.parent.name}/{path.name}"
            if DOWNLOADABLE_KEY.fullmatch(key):  # not a writer's staging file
                with contextlib.suppress(FileNotFoundError):  # removed meanwhile
                    yield path.name, datetime.fromtimestamp(path.stat().st_mtime, UTC)

    def delete(self, key: str) -> None:
        self.path_of(key).unlink(missing_ok=True)

    def path_of(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if not path.is_relative_to(self.root.resolve()):
            raise NotFound("artifact not found", code="artifact_not_found")
        return path

    def _sign(self, key: str, expires: int) -> str:
        return keys.sign(Purpose.DOWNLOAD_LINKS, _link(key, expires))


def _link(key: str, expires: int) -> bytes:
    return f"{key}\n{expires}".encode()
