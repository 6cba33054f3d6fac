"""Check `adapter_config.json` against what vLLM's LoRA loader accepts and serves correctly."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from registry.adapters import config_json, module_scaling, peft_keys, peft_targets, target_regex
from registry.errors import Unprocessable

FILE = "adapter_config.json"
VLLM_LARGEST_RANK = 512
# Options vLLM's LoRA path does not implement. Each is refused rather than served wrongly.
UNSUPPORTED_OPTIONS = {
    "use_dora": ("DoRA", "dora_unsupported"),
    "lora_bias": ("LoRA bias", "lora_bias_unsupported"),
    "use_qalora": ("QALoRA", "qalora_unsupported"),
    "modules_to_save": ("modules_to_save", "modules_to_save_unsupported"),
}


@dataclass(frozen=True)
class LoraSpec:
    r: int
    lora_alpha: float
    target_modules: tuple[str, ...] | str
    base_model_name: str
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def use_rslora(self) -> bool:
        return self.raw.get("use_rslora") is True

    def scaling(self) -> module_scaling.ModuleScaling:
        """peft's rank and scaling for each module (rank_pattern, alpha_pattern, use_rslora).
        One instance serves one upload: the pattern keys share a time budget."""
        return module_scaling.ModuleScaling(
            self.r, self.lora_alpha, self.use_rslora, self.raw.get("rank_pattern") or {},
            self.raw.get("alpha_pattern") or {}, refuse)

    def targets(self) -> peft_targets.Targets:
        """PEFT's rule for which modules and expert parameters this config targets. One
        instance serves one upload: a regex gets a time budget for all its module paths."""
        matcher = (target_regex.Matcher(self.target_modules, refuse)
                   if isinstance(self.target_modules, str) else None)
        return peft_targets.Targets(self.target_modules, self.raw, regex_match=matcher)


def refuse(message: str, *, code: str = "invalid_config", hint: str = "") -> Unprocessable:
    return Unprocessable(
        f"{FILE}: {message}", code=code,
        hint=hint or "Save the adapter with peft's save_pretrained and upload that folder.",
    )


def parse_config(data: bytes) -> LoraSpec:
    if not data.strip():
        raise refuse("the file is empty", code="empty_file")
    config = config_json.load(data, refuse)
    if not isinstance(config, dict):
        raise refuse("must be a JSON object")
    peft_type = config.get("peft_type")
    if peft_type != "LORA":
        raise refuse(f"peft_type is {str(peft_type)[:40]!r}; only LORA adapters can be served by vLLM",
                     code="unsupported_peft_type")
    for key, (what, code) in UNSUPPORTED_OPTIONS.items():
        if config.get(key):
            raise refuse(f"{key} is set; vLLM does not support {what}", code=code,
                         hint=f"Train without {what}, or merge it into the base model.")
    peft_keys.check(config, refuse)
    bias = config.get("bias", "none")
    if bias not in (None, "none"):
        raise refuse(f"bias is {str(bias)[:40]!r}; vLLM only serves adapters with bias 'none'",
                     code="bias_unsupported", hint="Train with LoraConfig(bias='none').")
    r = _rank(config.get("r"))
    alpha = _alpha(config.get("lora_alpha"))
    _patterns(config, "rank_pattern", _rank)
    _patterns(config, "alpha_pattern", _alpha)
    base = config.get("base_model_name_or_path")
    if not isinstance(base, str) or not base.strip():
        raise refuse("base_model_name_or_path is missing", code="missing_field",
                     hint="Set it to the registered base model's name.")
    if len(base) > 200:
        raise refuse("base_model_name_or_path is longer than 200 characters")
    return LoraSpec(r=r, lora_alpha=alpha, target_modules=_targets(config), base_model_name=base, raw=config)


def _rank(value: Any) -> int:
    if value is None:
        raise refuse("r is missing", code="missing_field")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise refuse(f"r must be a positive integer, got {str(value)[:40]!r}")
    if value > VLLM_LARGEST_RANK:
        raise refuse(f"r is {value}, above the largest rank vLLM supports ({VLLM_LARGEST_RANK})",
                     code="rank_too_large", hint="Retrain with a rank of 512 or less.")
    return value


def _alpha(value: Any) -> float:
    if value is None:
        raise refuse("lora_alpha is missing", code="missing_field")
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise refuse(f"lora_alpha must be a positive, finite number, got {str(value)[:40]!r}")
    return float(value)


def _patterns(config: dict, key: str, check_value) -> dict:
    """A rank_pattern or alpha_pattern: each key a regex peft can match cheaply, each value
    checked as r or lora_alpha is."""
    patterns = config.get(key) or {}
    if not isinstance(patterns, dict):
        raise refuse(f"{key} must be an object mapping module-name patterns to values")
    for pattern, value in patterns.items():
        if not pattern:
            raise refuse(f"{key} has an empty key", hint="Use module names such as 'q_proj' as keys.")
        target_regex.check(pattern, refuse, what=f"{key} key {pattern[:60]!r}", key=True)
        try:
            check_value(value)
        except Unprocessable as refused:
            raise refuse(f"{key} gives {pattern[:60]!r} a value that is not accepted: "
                         f"{refused.message.removeprefix(FILE + ': ')}", code=refused.code,
                         hint=refused.hint) from None
    return patterns


def _targets(config: dict) -> tuple[str, ...] | str:
    targets = config.get("target_modules")
    if targets == [] and config.get("target_parameters"):
        return ()  # peft saves this for an adapter of expert parameters only
    if targets is None or targets == [] or targets == "":
        raise refuse("target_modules is missing", code="missing_field")
    if isinstance(targets, str):
        target_regex.check(targets, refuse)
        return targets
    if (not isinstance(targets, list) or len(targets) > 64
            or not all(isinstance(t, str) and 0 < len(t) <= 100 for t in targets)):
        raise refuse("target_modules must be a list of up to 64 module names, or a regex")
    return tuple(sorted(set(targets)))
