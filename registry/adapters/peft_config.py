"""Check `adapter_config.json` against what vLLM's LoRA loader accepts."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from registry.errors import Unprocessable

FILE = "adapter_config.json"
VLLM_LARGEST_RANK = 512
# A quantified group containing a quantifier, e.g. (a+)+: catastrophic backtracking.
NESTED_QUANTIFIER = re.compile(r"\([^)]*[+*}][^)]*\)\s*[+*{]")
# Options vLLM's LoRA path does not implement. Each is refused rather than served wrongly.
UNSUPPORTED_OPTIONS = {
    "use_dora": ("DoRA", "dora_unsupported"),
    "lora_bias": ("LoRA bias", "lora_bias_unsupported"),
    "use_qalora": ("QALoRA", "qalora_unsupported"),
    "modules_to_save": ("modules_to_save", "modules_to_save_unsupported"),
    "target_parameters": ("target_parameters", "target_parameters_unsupported"),
    "layers_to_transform": ("layers_to_transform", "layers_to_transform_unsupported"),
}


@dataclass(frozen=True)
class LoraSpec:
    r: int
    lora_alpha: float
    target_modules: tuple[str, ...] | str
    base_model_name: str
    rank_pattern: dict[str, int] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    def targets(self, module_path: str) -> bool:
        """PEFT's rule: a list matches by dotted suffix, a string is a full regex match."""
        if isinstance(self.target_modules, str):
            return re.fullmatch(self.target_modules, module_path) is not None
        return any(module_path == t or module_path.endswith("." + t) for t in self.target_modules)

    def rank_for(self, module_path: str) -> int:
        """PEFT's rank_pattern rule: the first key matching the end of the module path wins."""
        for pattern, rank in self.rank_pattern.items():
            if re.match(rf"(.*\.)?({pattern})$", module_path):
                return rank
        return self.r


def refuse(message: str, *, code: str = "invalid_config", hint: str = "") -> Unprocessable:
    return Unprocessable(
        f"{FILE}: {message}", code=code,
        hint=hint or "Save the adapter with peft's save_pretrained and upload that folder.",
    )


def parse_config(data: bytes) -> LoraSpec:
    if not data.strip():
        raise refuse("the file is empty", code="empty_file")
    try:
        config = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise refuse(f"not valid JSON ({error})") from None
    if not isinstance(config, dict):
        raise refuse("must be a JSON object")
    peft_type = config.get("peft_type")
    if peft_type != "LORA":
        raise refuse(f"peft_type is {peft_type!r}; only LORA adapters can be served by vLLM",
                     code="unsupported_peft_type")
    for key, (what, code) in UNSUPPORTED_OPTIONS.items():
        if config.get(key):
            raise refuse(f"{key} is set; vLLM does not support {what}", code=code,
                         hint=f"Train without {what}, or merge it into the base model.")
    bias = config.get("bias", "none")
    if bias not in (None, "none"):
        raise refuse(f"bias is {bias!r}; vLLM only serves adapters with bias 'none'",
                     code="bias_unsupported", hint="Train with LoraConfig(bias='none').")
    r = _rank(config, "r", config.get("r"))
    alpha = config.get("lora_alpha")
    if alpha is None:
        raise refuse("lora_alpha is missing", code="missing_field")
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not alpha > 0:
        raise refuse(f"lora_alpha must be a positive number, got {alpha!r}")
    rank_pattern = _mapping(config, "rank_pattern")
    for pattern, value in rank_pattern.items():
        _regex(f"rank_pattern key {pattern!r}", pattern)
        _rank(config, f"rank_pattern[{pattern!r}]", value)
    for pattern, value in _mapping(config, "alpha_pattern").items():
        _regex(f"alpha_pattern key {pattern!r}", pattern)
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise refuse(f"alpha_pattern[{pattern!r}] must be a positive number, got {value!r}")
    base = config.get("base_model_name_or_path")
    if not isinstance(base, str) or not base.strip():
        raise refuse("base_model_name_or_path is missing", code="missing_field",
                     hint="Set it to the registered base model's name.")
    return LoraSpec(r=r, lora_alpha=float(alpha), target_modules=_targets(config),
                    base_model_name=base, rank_pattern=rank_pattern, raw=config)


def _rank(config: dict, label: str, value: Any) -> int:
    if value is None:
        raise refuse(f"{label} is missing", code="missing_field")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise refuse(f"{label} must be a positive integer, got {value!r}")
    if value > VLLM_LARGEST_RANK:
        raise refuse(f"{label} is {value}, above the largest rank vLLM supports ({VLLM_LARGEST_RANK})",
                     code="rank_too_large", hint="Retrain with a rank of 512 or less.")
    return value


def _targets(config: dict) -> tuple[str, ...] | str:
    targets = config.get("target_modules")
    if targets is None or targets == [] or targets == "":
        raise refuse("target_modules is missing", code="missing_field")
    if isinstance(targets, str):
        return _regex("target_modules", targets)
    if not isinstance(targets, list) or not all(isinstance(t, str) and t for t in targets):
        raise refuse(f"target_modules must be a list of module names or a regex, got {targets!r}")
    return tuple(sorted(set(targets)))


def _mapping(config: dict, key: str) -> dict:
    value = config.get(key) or {}
    if not isinstance(value, dict):
        raise refuse(f"{key} must be an object, got {value!r}")
    return value


def _regex(label: str, pattern: str) -> str:
    if len(pattern) > 256 or NESTED_QUANTIFIER.search(pattern):
        raise refuse(f"{label} is too long or has nested quantifiers",
                     hint="Use a list of module names, or a simple regex.")
    try:
        re.compile(pattern)
    except re.error as error:
        raise refuse(f"{label} is not a valid regex ({error})") from None
    return pattern
