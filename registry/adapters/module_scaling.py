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
    """peft's rank and alpha for each module path of one upload; the pattern keys share one
    matching budget (target_regex.MATCH_BUDGET_S)."""

    def __init__(self, r: int, lora_alpha: float, use_rslora: bool, rank_pattern: dict,
                 alpha_pattern: dict, refuse: target_regex.Refuse) -> None:
        self.default = Scaling(r, lora_alpha, use_rslora)
        ends = target_regex.deadline()

        def matchers(patterns: dict, what: str) -> list[tuple[target_regex.Matcher, object]]:
            return [(target_regex.Matcher(rf"(.*\.)?({key})", refuse, what=f"{what} key {key[:60]!r}",
                                          ends=ends), value) for key, value in patterns.items()]

        self.ranks = matchers(rank_pattern, "rank_pattern")
        self.alphas = matchers(alpha_pattern, "alpha_pattern")

    @property
    def uniform(self) -> bool:
        """Whether every module gets r and lora_alpha: no pattern key at all."""
        return not self.ranks and not self.alphas

    def of(self, path: str) -> Scaling:
        rank = next((value for matches, value in self.ranks if matches(path)), self.default.rank)
        alpha = next((value for matches, value in self.alphas if matches(path)), self.default.alpha)
        return Scaling(int(rank), float(alpha), self.default.use_rslora)
