from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import BinaryIO, Protocol

BLOB_PREFIX = "blobs/sha256/"


class BlobWriter(Protocol):
    """An object being written part by part; invisible until `complete`."""

    part_size: int

    def upload_part(self, number: int, data: BinaryIO) -> None: ...
    def complete(self) -> None: ...
    def abort(self) -> None: ...


class ArtifactStore(Protocol):
    """Content-addressed blobs: a key never changes its bytes, so writing one that exists is skipped."""

    def has(self, key: str) -> bool: ...

    def put_file(self, key: str, path: Path) -> None: ...

    def put_bytes(self, key: str, data: bytes) -> None: ...

    def get_bytes(self, key: str) -> bytes: ...

    def get_file(self, key: str, path: Path) -> None:
        """Copy the object to path (replaced whole, never left partial)."""

    def begin_write(self, key: str) -> BlobWriter | None:
        """A writer that streams into `key` while a request is still arriving, or None where
        streaming gains nothing (a local folder renames the finished file instead)."""

    def presigned_url(self, key: str, ttl_s: int) -> str:
        """A URL that downloads the object without other credentials, valid for ttl_s."""

    def check(self) -> None:
        """Raise if the store cannot be used (for /readyz)."""

    def list_blobs(self) -> Iterator[tuple[str, datetime]]:
        """(sha256, last written) of every content-addressed blob, in no particular order."""

    def delete(self, key: str) -> None:
        """Remove the object; removing one that is not there is no error."""
