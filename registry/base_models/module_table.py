"""A base's module table: every module and parameter a LoRA can target, with its kind and shape,
derived from the real architecture by transformers (derivation.py, in processes of their own).
The table is computed once per base and stored with it (stored_tables.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from functools import cached_property
from typing import Literal

Kind = Literal["linear", "embedding", "expert_parameter"]
# What a stored table's derivation knew. Raise it when the derivation learns to say more (2:
# checkpoint renames, the architecture config.json names, experts stored (experts, in, out)):
# tables stored in an older format are derived again when they are next read.
TABLE_FORMAT = 2


@dataclass(frozen=True)
class ModuleEntry:
    name: str  # qualified, with `*` for the decoder layer: model.layers.*.self_attn.q_proj
    kind: Kind
    in_features: int
    out_features: int
    experts: int | None  # the experts an expert_parameter holds, else None
    layers: tuple[int, ...]  # the layers that have it (empty: a module outside the layers)


    @property
    def short_name(self) -> str:
        return self.name.rsplit(".", 1)[-1]

    def weight_count(self) -> int:
        """Weights in every layer that has it: what sizing adds up."""
        count = self.in_features * self.out_features * (self.experts or 1)
        return count * max(len(self.layers), 1)


@dataclass(frozen=True)
class ModuleTable:
    architecture: str
    transformers: str  # the version that built it
    hidden_size: int
    num_layers: int
    vocab_size: int
    tied_embeddings: bool
    modules: tuple[ModuleEntry, ...]  # in the model's order: peft nests expert parameters by it
    # Module path segments the model's checkpoints name otherwise than this transformers does,
    # as (the checkpoints', the table's): Mixtral's (".block_sparse_moe.", ".mlp."). vLLM's
    # classes keep the checkpoints' names, and look LoRAs up by them.
    renamed: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict:
        return {**{field.name: getattr(self, field.name) for field in fields(self)
                   if field.name not in ("modules", "renamed")},
                "modules": [{**asdict(entry), "layers": list(entry.layers)} for entry in self.modules],
                "renamed": [list(pair) for pair in self.renamed], "format": TABLE_FORMAT}

    @staticmethod
    def is_current(data: dict) -> bool:
        """Whether a stored table was derived as this code derives them."""
        return data.get("format", 1) >= TABLE_FORMAT

    @classmethod
    def from_json(cls, data: dict) -> ModuleTable:
        """Keys it does not know are left out: a newer registry's table still reads."""
        known = {field.name for field in fields(cls)}
        data = {key: value for key, value in data.items() if key in known}
        return cls(**{**data, "modules": tuple(ModuleEntry(**{**entry, "layers": tuple(entry["layers"])})
                                               for entry in data["modules"]),
                      "renamed": tuple(tuple(pair) for pair in data.get("renamed", ()))})

    def entry(self, pattern: str, layer: int | None = None) -> ModuleEntry | None:
        """The module at this name (`*` for its layer number) in this layer. A name can have
        several shapes: Gemma 4's global-attention layers are wider than its local ones."""
        found = self._by_name.get(pattern, [])
        in_layer = [entry for entry in found if layer is None or layer in entry.layers or not entry.layers]
        candidates = in_layer or found
        return candidates[0] if candidates else None

    def table_name(self, path: str) -> str:
        """A module path as this table spells it: the checkpoints' names read as transformers'."""
        dotted = f".{path}."
        for checkpoints, table in self.renamed:
            dotted = dotted.replace(checkpoints, table)
        return dotted[1:-1]

    def checkpoint_name(self, path: str) -> str | None:
        """The checkpoints' name of a path spelt as this transformers spells a renamed module
        (the name vLLM knows it by), or None when no segment of it was renamed."""
        dotted = f".{path}."
        named = dotted
        for checkpoints, table in self.renamed:
            named = named.replace(table, checkpoints)
        return named[1:-1] if named != dotted else None

    def expert_parameters(self, owner: str) -> list[ModuleEntry]:
        """The 3-D parameters a module holds, in the order the model registers them."""
        return [entry for entry in self.modules
                if entry.kind == "expert_parameter" and entry.name.rsplit(".", 1)[0] == owner]

    def is_output_embedding(self, entry: ModuleEntry) -> bool:
        """The lm_head: a linear outside the layers, as wide as the vocabulary."""
        return entry.kind == "linear" and not entry.layers and entry.out_features == self.vocab_size

    def lora_tensor_bound(self) -> int:
        """The most tensors a LoRA of this base can hold: two for every module in every layer,
        and for every expert's gate, up and down projections where they are saved one by one."""
        return 2 * sum(max(len(entry.layers), 1) * (3 * entry.experts if entry.experts else 1)
                       for entry in self.modules)

    @cached_property
    def _by_name(self) -> dict[str, list[ModuleEntry]]:
        named: dict[str, list[ModuleEntry]] = {}
        for entry in self.modules:
            named.setdefault(entry.name, []).append(entry)
        return named
