"""How a version is stored: content-addressed blobs (the two PEFT files, the model card and the
verified model-signing signature when they came with them) and a manifest that names them.

The version's digest is the sha256 of the canonical manifest, so the same config and weights
always get the same digest, whether they arrived as two files, a .tar.gz or a .zip. Blobs are
shared between versions that have the same bytes.
"""

from __future__ import annotations

from registry.adapters.peft_config import FILE as CONFIG_FILE
from registry.adapters.safetensors_check import FILE as WEIGHTS_FILE


def blob_key(sha256: str) -> str:
    return f"blobs/sha256/{sha256[:2]}/{sha256}"


def manifest(*, config_sha256: str, config_size: int, weights_sha256: str, weights_size: int,
             model_card: dict | None = None, signature: dict | None = None) -> list[dict]:
    """`model_card`: README.md's {name, sha256, size}; `signature`: the verified model.sig's. Each
    is kept as one of the version's files, so the digest covers it too."""
    return [
        {"name": CONFIG_FILE, "sha256": config_sha256, "size": config_size},
        {"name": WEIGHTS_FILE, "sha256": weights_sha256, "size": weights_size},
        *([model_card] if model_card is not None else []),
        *([signature] if signature is not None else []),
    ]



