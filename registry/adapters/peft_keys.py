"""The keys adapter_config.json may hold, and the values accepted for those PEFT acts on.

The evaluation loads every adapter with `PeftModel.from_pretrained`, which does what the config
says before the saved weights are loaded: `init_lora_weights: "pissa"` runs an SVD of every
targeted base weight and changes those weights (minutes of CPU on a real base, and a reference
that is no longer the base), `megatron_config` imports the module `megatron_core` names, a
regex in `exclude_modules` is matched against every module name by `re`, without a time
limit (a pattern key is too, so parse_config bounds each one as target_modules' regex). So only
the keys peft writes are accepted (those of PEFT_VERSION's
LoraConfig; tests/registry/adapters/test_peft_keys.py compares them with the installed peft),
and each key that changes how an adapter is built or loaded only with its inert default. The
keys parse_config checks itself (peft_type, r, lora_alpha, bias, target_modules, ...) are
listed as checked elsewhere.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

from registry.errors import Unprocessable

PEFT_VERSION = "0.21.2"
TASK_TYPES = ("SEQ_CLS", "SEQ_2_SEQ_LM", "CAUSAL_LM", "TOKEN_CLS", "QUESTION_ANS",
              "FEATURE_EXTRACTION")
MODULE_NAME = re.compile(r"[A-Za-z0-9_.]{1,100}")  # no regex syntax: '.' alone cannot backtrack
MAX_PATTERN_KEYS = 64
PLAIN_HINT = "Save the adapter with peft's save_pretrained, leaving this option at its default."

Refuse = Callable[..., Unprocessable]
# A check returns why a value is refused, or None when it is accepted.
Check = Callable[[Any], "str | None"]


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _shown(value: Any) -> str:
    text = _json(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is(*allowed: Any) -> Check:
    """Exactly these JSON values (true is not 1, and {} is not null)."""
    shown = " or ".join(_json(value) for value in allowed)

    def check(value: Any) -> str | None:
        if any(type(value) is type(option) and value == option for option in allowed):
            return None
        return f"only {shown} is accepted"

    return check


def _inert(*allowed: Any, because: str) -> Check:
    accepted = _is(*allowed)

    def check(value: Any) -> str | None:
        refused = accepted(value)
        return None if refused is None else f"{refused}, because {because}"

    return check


def _short_text(value: Any) -> str | None:
    return None if value is None or (isinstance(value, str) and len(value) <= 200) else \
        "it must be text of at most 200 characters, or null"


def _boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else "it must be true or false"


def _dropout(value: Any) -> str | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1
    return None if ok and math.isfinite(value) else "it must be a number from 0 up to (not including) 1"


def _group_size(value: Any) -> str | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 1 << 20
    return None if ok else "it must be a positive integer"


def _module_names(value: Any) -> str | None:
    if value is None or (isinstance(value, list) and len(value) <= 64
                         and all(isinstance(name, str) and MODULE_NAME.fullmatch(name) for name in value)):
        return None
    if isinstance(value, str):
        return ("a regex is matched against every module name by re, without a time limit, when "
                "the evaluation loads the adapter; list the module names instead")
    return "it must be null or a list of up to 64 module names (letters, digits, '_' and '.')"


def _layer_numbers(value: Any) -> str | None:
    """A layer number or a list of them: the layers PEFT applies name-suffix targets to."""
    numbers = [value] if isinstance(value, int) and not isinstance(value, bool) else value
    if value is None or (isinstance(numbers, list) and len(numbers) <= 1024 and all(
            isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 1 << 20 for n in numbers)):
        return None
    return "it must be null, a layer number, or a list of up to 1024 layer numbers"


def _layers_pattern(value: Any) -> str | None:
    """The name of the layer list (`layers`, `h`): PEFT puts it in a regex, so only a name."""
    names = [value] if isinstance(value, str) else value
    if value is None or (isinstance(names, list) and len(names) <= 16
                         and all(isinstance(n, str) and MODULE_NAME.fullmatch(n) for n in names)):
        return None
    return "it must be null, or a module name or list of up to 16 (letters, digits, '_' and '.')"


def _patterns(value: Any) -> str | None:
    """rank_pattern / alpha_pattern: parse_config checks each key as a bounded regex, and its
    value."""
    if value is None or (isinstance(value, dict) and len(value) <= MAX_PATTERN_KEYS):
        return None
    return f"it must be an object of at most {MAX_PATTERN_KEYS} module-name patterns, or null"


def _auto_mapping(value: Any) -> str | None:
    """peft writes the base's class here when no task_type is set; AutoPeftModel imports
    parent_library, so only a transformers module is accepted."""
    if value is None:
        return None
    if (isinstance(value, dict) and set(value) == {"base_model_class", "parent_library"}
            and isinstance(value["base_model_class"], str) and value["base_model_class"].isidentifier()
            and isinstance(value["parent_library"], str) and len(value["parent_library"]) <= 200
            and re.fullmatch(r"transformers(\.[A-Za-z0-9_]+)*", value["parent_library"])):
        return None
    return ("it must be null, or name a transformers class as peft writes it "
            '({"base_model_class": ..., "parent_library": "transformers..."}): AutoPeftModel '
            "imports the parent_library it names")


CHECKED_ELSEWHERE = ("peft_type", "base_model_name_or_path", "r", "lora_alpha", "target_modules",
                     "bias")
LOADS = "peft acts on it when the evaluation loads the adapter"
VARIANT = "it makes a LoRA variant that the registry does not check or serve"
INITIALISES = ("peft runs this initialisation when the evaluation loads the adapter, before the saved "
               "weights: pissa, olora, corda and loftq rewrite the base weights (pissa and corda after "
               "an SVD of each one)")
CONFIGURES = ("it configures an initialisation that peft runs on the base weights when the "
              "evaluation loads the adapter")
HINTS = {"init_lora_weights": "Set it to true: a trained plain LoRA's saved weights do not depend "
                              "on it. Convert a PiSSA, OLoRA, CorDA or LoftQ adapter to a plain "
                              "LoRA first (save_pretrained's path_initial_model_for_weight_conversion)."}
CHECKS: dict[str, Check] = {
    # PeftConfig
    "task_type": _is(None, *TASK_TYPES),
    "auto_mapping": _auto_mapping,
    "peft_version": _short_text,
    "revision": _short_text,
    "inference_mode": _boolean,
    # LoraConfig
    "exclude_modules": _module_names,
    "lora_dropout": _dropout,
    "fan_in_fan_out": _boolean,
    "use_rslora": _boolean,
    "modules_to_save": _inert(None, [], because="vLLM serves only the LoRA weights"),
    "init_lora_weights": _inert(True, False, because=INITIALISES),
    "layers_to_transform": _layer_numbers,
    "layers_pattern": _layers_pattern,
    "rank_pattern": _patterns,
    "alpha_pattern": _patterns,
    "megatron_config": _inert(None, because=f"{LOADS}: it builds Megatron layers"),
    "megatron_core": _inert("megatron.core", None, because="peft imports the module it names"),
    "trainable_token_indices": _inert(None, because="vLLM does not serve trained token embeddings"),
    "loftq_config": _inert({}, None, because=CONFIGURES),
    "eva_config": _inert(None, because=CONFIGURES),
    "corda_config": _inert(None, because=CONFIGURES),
    "lora_ga_config": _inert(None, because=CONFIGURES),
    "use_dora": _inert(False, because=VARIANT),
    "velora_config": _inert(None, because=VARIANT),
    "alora_invocation_tokens": _inert(None, because=VARIANT),
    "use_qalora": _inert(False, because=VARIANT),
    "qalora_group_size": _group_size,
    "monteclora_config": _inert(None, because=VARIANT),
    "layer_replication": _inert(None, because=f"{LOADS}: it changes the base model's layers"),
    "runtime_config": _inert(None, {}, {"ephemeral_gpu_offload": False}, because=LOADS),
    "lora_bias": _inert(False, because=VARIANT),
    "target_parameters": _module_names,
    "use_bdlora": _inert(None, because=VARIANT),
    "arrow_config": _inert(None, because=VARIANT),
    "kasa_config": _inert(None, because=f"{VARIANT}, and it runs an SVD of each targeted weight"),
    "ensure_weight_tying": _boolean,
}
KNOWN_KEYS = frozenset(CHECKED_ELSEWHERE) | CHECKS.keys()


def check(config: dict, refuse: Refuse) -> None:
    """Refuse unknown keys, naming them, then the first key whose value is not accepted."""
    unknown = sorted(key for key in config if key not in KNOWN_KEYS)
    if unknown:
        named = ", ".join(repr(key[:60]) for key in unknown[:5])
        named += " ..." if len(unknown) > 5 else ""
        raise refuse(
            f"unknown key{'s' if len(unknown) > 1 else ''} {named}; the registry accepts the keys "
            f"of peft {PEFT_VERSION}'s LoraConfig", code="unknown_config_key",
            hint=f"Remove {'them' if len(unknown) > 1 else 'it'}, or save the adapter with peft "
                 f"{PEFT_VERSION} or older; a newer peft's keys are accepted once the registry "
                 "knows them.")
    for key, accepts in CHECKS.items():
        if key in config and (why := accepts(config[key])) is not None:
            raise refuse(f"{key} is {_shown(config[key])}; {why}", code="config_option_refused",
                         hint=HINTS.get(key, PLAIN_HINT))
