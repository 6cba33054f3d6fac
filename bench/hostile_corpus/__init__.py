"""Hostile uploads: archives, multipart bodies, JSON configs and safetensors headers built to
take a registry down. Shared by tests/registry/test_hostile_inputs.py (which draws the
parameters with hypothesis) and bench/hostile.py (which sends a fixed grid of them).

Every attack is refused by construction: none of them is a valid adapter, whatever its
parameters, so a 2xx answer is as much a failure as a 5xx.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from bench.hostile_corpus.adapter import Adapter, synthesize_adapter
from bench.hostile_corpus.multipart import form_body

__all__ = ["Adapter", "Attack", "as_attack", "synthesize_adapter"]


@dataclass(frozen=True, repr=False)
class Attack:
    name: str  # family and variant, e.g. "tar_long_name/gnu/gz/150000000"
    body: bytes  # a whole multipart/form-data request body
    content_type: str

    def __repr__(self) -> str:  # the body can be megabytes
        return f"Attack({self.name!r}, {len(self.body)} bytes)"

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.content_type.encode() + b"\0" + self.body).hexdigest()


def as_attack(name: str, files: list[tuple[str, bytes]], fields: dict[str, str] | None = None) -> Attack:
    """An upload of these files (and text fields), as `curl -F` would send it."""
    body, content_type = form_body(files, fields or {})
    return Attack(name, body, content_type)
