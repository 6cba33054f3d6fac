from __future__ import annotations

from pathlib import Path
from typing import Protocol


class ArtifactStore(Protocol):
    def put_file(self, key: str, path: Path) -> None:
        """Store the file under key. Keys are content-addressed, so an existing key is kept."""

    def presigned_url(self, key: str, ttl_s: int) -> str:
        """A URL that downloads the object without other credentials, valid for ttl_s."""

    def check(self) -> None:
        """Raise if the store cannot be used (for /readyz)."""
