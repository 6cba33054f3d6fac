"""The active set's entries, as the agent accepts them. Neither the registry's answer nor the
last-known-good copy on disk is trusted to be well formed: a digest becomes a folder name in the
cache and a file name a path inside it, so each is checked here, before anything uses it. An entry
that fails is refused whole, and reported by its served name when that name is itself well formed
(the registry accepts failures only under a served name)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator

DIGEST = r"^[0-9a-f]{64}$"
# The registry's rule for served names (tenant/name@N) in node reports.
SERVED_NAME = r"^[a-z0-9][a-z0-9_-]{0,62}/[a-z0-9][a-z0-9_-]{0,62}@[1-9][0-9]{0,9}$"
SERVED_NAME_RE = re.compile(SERVED_NAME)
# A plain file name: no separator, no leading dot (so neither '..' nor the cache's own markers).
SAFE_FILE = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"

RULES = {
    "served_name": "must be tenant/name@N",
    "digest": "must be 64 lowercase hex characters",
    "sha256": "must be 64 lowercase hex characters",
    "name": "must be a plain file name: a letter or digit, then letters, digits, '.', '_' or '-'",
    "size": "must be a whole number of bytes",
    "url": "must be an http(s) URL",
    "files": "must list each file once",
}


class ArtifactFile(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    name: str = Field(pattern=SAFE_FILE)
    sha256: str = Field(pattern=DIGEST)
    size: StrictInt = Field(ge=0, le=2**50)
    url: str = Field(pattern=r"^https?://", max_length=16384)


class Entry(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    served_name: str = Field(pattern=SERVED_NAME, max_length=140)
    digest: str = Field(pattern=DIGEST)
    files: tuple[ArtifactFile, ...] = Field(min_length=1, max_length=4096)
    # The signed approval, checked by serving.agent.proof before anything is downloaded or loaded.
    attestation: dict[str, Any] | None = None
    # No alias left: kept only until traffic has moved on, never loaded on demand.
    retiring: bool = False
    # The pool's long tail (overflow on_demand) that this node is not placed to hold: loaded only
    # when vLLM's resolver asks for it (on_demand.py), never ahead.
    on_demand: bool = False

    @field_validator("files")
    @classmethod
    def _each_file_once(cls, files: tuple[ArtifactFile, ...]) -> tuple[ArtifactFile, ...]:
        if len({f.name for f in files}) != len(files):
            raise ValueError("a file name is listed twice")
        return files

    def manifest(self) -> list[dict[str, Any]]:
        """What the digest is computed over."""
        return [{"name": f.name, "sha256": f.sha256, "size": f.size} for f in self.files]


@dataclass
class Parsed:
    wanted: dict[str, Entry] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)  # served name -> why
    unnamed: list[str] = field(default_factory=list)  # why, for entries without a usable name


def parse(raw_entries: Any) -> Parsed:
    parsed = Parsed()
    if not isinstance(raw_entries, list):
        parsed.unnamed.append("the active set's entries are not a list")
        return parsed
    named: dict[str, list[Any]] = {}
    for raw in raw_entries:
        name = raw.get("served_name") if isinstance(raw, dict) else None
        if isinstance(name, str) and SERVED_NAME_RE.fullmatch(name):
            named.setdefault(name, []).append(raw)
        else:
            parsed.unnamed.append(f"refused an entry without a valid served name ({shown(name)})")
    for name, raws in named.items():
        if len(raws) > 1:
            parsed.refused[name] = "refused: the registry sent this served name more than once"
            continue
        try:
            parsed.wanted[name] = Entry.model_validate(raws[0])
        except ValidationError as error:
            parsed.refused[name] = f"refused the registry's entry: {_explain(error)}"
    return parsed


def _explain(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "entry"
    rule = next((RULES[part] for part in reversed(first["loc"]) if part in RULES), first["msg"])
    value = first.get("input")
    got = "" if isinstance(value, (dict, list, tuple)) else f" (got {shown(value)})"
    return f"{where} {rule}{got}"


def shown(value: Any) -> str:
    """A value from outside, safe to log and report: printable, and short."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
