"""A base's module table: every module and parameter a LoRA can target, with its kind and shape,
derived from the real architecture by transformers (skeleton.py, in a process of its own).

The registry never imports torch: `derive` starts that process (which bounds its own memory and
CPU time), bounded in wall time and output, and reads its JSON. The table is computed once per base and stored with it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Literal

from registry.errors import Unavailable, Unprocessable

Kind = Literal["linear", "embedding", "expert_parameter"]
DERIVE_TIMEOUT_S = 120  # the first import of torch and transformers takes seconds; a build, less
MAX_OUTPUT_BYTES = 4 * 1024**2
MAX_CONFIG_BYTES = 256 * 1024


@dataclass(frozen=True)
class ModuleEntry:
    name: str  # qualified, with `*` for the decoder layer: model.layers.*.self_attn.q_proj
    kind: Kind
    in_features: int
    out_features: int
    experts: int | None  # the experts an expert_parameter holds, else None
    layers: tuple[int, ...]  # the layers that have it (empty: a module outside the layers)


@dataclass(frozen=True)
class ModuleTable:
    architecture: str
    transformers: str  # the version that built it
    modules: tuple[ModuleEntry, ...]

    def to_json(self) -> dict:
        return {"architecture": self.architecture, "transformers": self.transformers,
                "modules": [{**entry.__dict__, "layers": list(entry.layers)} for entry in self.modules]}

    @classmethod
    def from_json(cls, data: dict) -> ModuleTable:
        return cls(architecture=data["architecture"], transformers=data["transformers"],
                   modules=tuple(ModuleEntry(**{**entry, "layers": tuple(entry["layers"])})
                                 for entry in data["modules"]))


def derive(config: dict, *, python: str = sys.executable) -> ModuleTable:
    """The table of the base this config.json describes; Unprocessable when the installed
    transformers cannot build it, with the reason and its version."""
    text = json.dumps(config)
    if len(text) > MAX_CONFIG_BYTES:
        raise Unprocessable(f"config.json is {len(text)} bytes; at most {MAX_CONFIG_BYTES} are accepted",
                            code="invalid_base_config", hint="Send the model's config.json as it was saved.")
    try:
        done = subprocess.run([python, "-m", "registry.base_models.skeleton"], input=text.encode(),
                              capture_output=True, timeout=DERIVE_TIMEOUT_S,
                              env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    except subprocess.TimeoutExpired:
        raise Unprocessable(f"building the model from config.json took over {DERIVE_TIMEOUT_S} s",
                            code="invalid_base_config",
                            hint="Check num_hidden_layers and the other sizes in config.json.") from None
    answer = _answer(done)
    if "error" in answer:
        raise Unprocessable(
            f"transformers {answer.get('transformers', '?')} cannot build this base: {answer['error']}",
            code="unsupported_architecture",
            hint="Send the config.json the model was saved with; a newer architecture may need a newer "
                 "transformers on the registry.")
    return ModuleTable.from_json(answer)


def _answer(done: subprocess.CompletedProcess) -> dict:
    if len(done.stdout) > MAX_OUTPUT_BYTES:
        raise Unprocessable("the base's module table is too large", code="invalid_base_config")
    try:
        answer = json.loads(done.stdout.decode() or "null")
    except ValueError:
        answer = None
    if not isinstance(answer, dict):  # killed by its limits, or no transformers at all
        raise Unavailable(f"deriving the module table failed (exit {done.returncode}): "
                          f"{done.stderr.decode(errors='replace')[-500:]}", code="derivation_failed",
                          hint="Check that torch and transformers are installed beside the registry.")
    return answer
