"""Which modules and expert parameters an adapter_config.json targets, by PEFT's own rule
(peft/tuners/tuners_utils.py, check_target_module_exists and _inject_parameters):

- exclude_modules wins: a module named there, in full or by dotted suffix, is never targeted;
- a string target_modules is a regex the whole module path must match;
- a list matches a path in full, or by dotted suffix; only a suffix match is then held to
  layers_to_transform, whose layer number is the first number after layers_pattern (or after
  any name, without one);
- target_parameters match a parameter's path (`model.layers.0.mlp.experts.gate_up_proj`) in
  full or by dotted suffix.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

ANY_LAYER = re.compile(r".*?\.[^.]*\.(\d+)\.")


class Targets:
    def __init__(self, target_modules: tuple[str, ...] | str, config: dict[str, Any], *,
                 regex_match: Callable[[str], bool] | None) -> None:
        self._modules = target_modules
        # peft expands "all-linear" to every linear layer but the output embedding (the module
        # table knows which that is); it saves the expansion, but a config may still say it.
        self.all_linear = isinstance(target_modules, str) and target_modules.lower() == "all-linear"
        self._regex_match = None if self.all_linear else regex_match
        self._excluded = tuple(config.get("exclude_modules") or ())
        self._parameters = tuple(config.get("target_parameters") or ())
        layers = config.get("layers_to_transform")
        # peft reads an empty list as no filter at all
        self._layers = None if layers in (None, []) else frozenset([layers] if isinstance(layers, int) else layers)
        pattern = config.get("layers_pattern")
        names = [pattern] if isinstance(pattern, str) else pattern
        self._layer_number = ANY_LAYER if not names else re.compile(
            r"(?:^|.*?\.)(?:" + "|".join(names) + r")\.(\d+)\.")

    @property
    def listed(self) -> tuple[str, ...]:
        """The module names of a list target_modules (none for a regex)."""
        return () if isinstance(self._modules, str) else self._modules

    @property
    def parameters(self) -> tuple[str, ...]:
        return self._parameters

    def module(self, path: str, *, linear: bool = False) -> bool:
        """`linear`: the module is a linear layer other than the output embedding, which is
        what "all-linear" expands to."""
        if _named(path, self._excluded):
            return False
        if self.all_linear:
            return linear
        if isinstance(self._modules, str):
            return self._regex_match is not None and self._regex_match(path)
        if path in self._modules:
            return True
        if not _named(path, self._modules):
            return False
        if self._layers is None:
            return True
        found = self._layer_number.match(path)
        return found is not None and int(found.group(1)) in self._layers

    def parameter(self, path: str) -> bool:
        return _named(path, self._parameters)


def _named(path: str, names: tuple[str, ...]) -> bool:
    return any(path == name or path.endswith("." + name) for name in names)
