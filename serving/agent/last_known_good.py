"""The last active set the registry gave this node, kept on disk: with the registry away, even
across an agent or vLLM restart, the node goes on serving exactly that set."""

from __future__ import annotations

import json
import os
from pathlib import Path

from serving.registry_client import ActiveSet


class LastKnownGood:
    def __init__(self, state_dir: Path) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / "active-set.json"

    def load(self) -> ActiveSet | None:
        try:
            saved = json.loads(self.path.read_text())
            return ActiveSet(saved["generation"], saved["entries"], saved["etag"], saved.get("limits"),
                             saved.get("signed"))
        except (OSError, ValueError, KeyError):
            return None

    def save(self, active: ActiveSet) -> None:
        staging = self.path.with_suffix(f".{os.getpid()}.tmp")
        staging.write_text(json.dumps({"generation": active.generation, "entries": active.entries,
                                       "etag": active.etag, "limits": active.limits,
                                       "signed": active.signed}))
        os.replace(staging, self.path)  # whole or not at all, even if the agent dies here
