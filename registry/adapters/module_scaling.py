"""Each module's rank and scaling, as peft computes them when it loads the adapter.

`rank_pattern` and `alpha_pattern` map regex keys to a rank or an alpha. For a module path peft
takes the first key, in the config's order, that matches `re.match(rf"(.*\\.)?({key})$", path)`
(peft.utils.other.get_pattern_key); a module no key matches gets `r` and `lora_alpha`. The
scaling is alpha / rank, or alpha / sqrt(rank) with `use_rslora`. vLLM 0.32 resolves the same
rule (vllm/lora/peft_helper.py); an engine that applies one `lora_alpha / r` to every module
needs the scaling folded into the weights instead (scaling_fold.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from registry.adapters import target_regex


@dataclass(frozen=True)
class Scaling:
    rank: int
    alpha: float
    use_rslora: bool = False

    @property
    def factor(self) -> float:
        return self.alpha / (math.sqrt(self.rank) if self.use_rslora else self.rank)


class ModuleScaling:
    r"""peft's rank and alpha for each module path of one upload. Each pattern dict is matched as
    one regex, `(?P<k0>(.*\.)?(key0))|(?P<k1>(.*\.)?(key1))|...`: alternatives are tried in
    order, each to the end, so the one that matches is the first key that peft's loop would
    take, for one call per module instead of one per key. The keys (checked by
    peft_config._patterns) name no groups, so numbering inside them does not matter."""

    def __init__(self, r: int, lora_alpha: float, use_rslora: bool, rank_pattern: dict,
                 alpha_pattern: dict, refuse: target_regex.Refuse) -> None:
        self.default = Scaling(r, lora_alpha, use_rslora)
        ends = target_regex.deadline()
        self.ranks = _Patterns(rank_pattern, "rank_pattern", refuse, ends)
        self.alphas = _Patterns(alpha_pattern, "alpha_pattern", refuse, ends)

    def of(self, path: str) -> Scaling:
        rank = self.ranks.value(path, self.default.rank)
        alpha = self.alphas.value(path, self.default.alpha)
        return Scaling(int(rank), float(alpha), self.default.use_rslora)


class _Patterns:
    def __init__(self, patterns: dict, what: str, refuse: target_regex.Refuse, ends: float) -> None:
        self.values = list(patterns.values())
        joined = "|".join(f"(?P<k{i}>(.*\\.)?({key}))" for i, key in enumerate(patterns))
        self.matcher = (target_regex.Matcher(joined, refuse, what=f"a key of {what}", ends=ends)
                        if patterns else None)

    def value(self, path: str, default: float) -> float:
        found = self.matcher.fullmatch(path) if self.matcher else None
        if found is None:
            return default
        return next(value for i, value in enumerate(self.values) if found.group(f"k{i}") is not None)
