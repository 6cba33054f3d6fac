"""Every module and parameter a LoRA can target in a base, read from its real architecture.

This module runs in the registry's derivation processes only (derivation.py), never in the
registry itself: it imports torch and transformers, and the registry's request path must not.
A warm process imports it once; each derivation runs in a process forked from it, which bounds
its own memory and CPU time. transformers builds the model from the config alone on the meta
device: no weights, no memory for them, never code from the config (no trust_remote_code), and
never the network (the hub is offline before transformers is imported).

`answer` sends one JSON object: {"transformers": version, "architecture": class name,
"hidden_size", "num_layers", "vocab_size", "tied_embeddings", "modules": [...], "renamed": [...]}
(module_table.ModuleTable's fields; modules in the model's own order, which names the expert
parameters peft nests), or {"error": message, "transformers": version}.
"""

from __future__ import annotations

import json
import os
import re
import resource
from collections import defaultdict

os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")

import torch  # noqa: E402  (imported once, in the warm process: each derivation forks from it)
import transformers  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel  # noqa: E402
from transformers.pytorch_utils import Conv1D  # noqa: E402

# A skeleton holds no weights, so it needs far less than this. Set in the forked process itself.
MEMORY_BYTES = 4 * 1024**3
CPU_SECONDS = 120
LAYER = re.compile(r"\.(\d+)\.")  # the first number in a name is its decoder layer
EXPERT_PROJECTIONS = ("gate_up_proj", "gate_proj", "up_proj", "down_proj", "w1", "w2", "w3")
SEGMENT_RENAME = re.compile(r"\.[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*\.")


def answer(sending, config_text: bytes) -> None:
    """A derivation, in a process of its own: the table of this config.json, or why not."""
    limit = memory_limit()
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))
    _quiet()
    try:
        config = json.loads(config_text)
        if not isinstance(config, dict):
            raise ValueError("config.json is not a JSON object")
        found = describe(config)
    except MemoryError:
        found = ({"error": f"building it from config.json needed over {MEMORY_BYTES // 1024**3} GiB",
                  "transformers": transformers.__version__} if limit >= MEMORY_BYTES
                 else out_of_memory(limit, MEMORY_BYTES))
    except Exception as error:  # any refusal of the config, reported to the registry
        found = {"error": _first_sentence(str(error)), "transformers": transformers.__version__}
    sending.send_bytes(json.dumps(found).encode())


def memory_limit() -> int:
    """MEMORY_BYTES, or less where the registry itself runs under a lower hard limit."""
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    return MEMORY_BYTES if hard == resource.RLIM_INFINITY else min(MEMORY_BYTES, hard)


def out_of_memory(limit: int, needed: int) -> dict:
    """The answer of a derivation that ran out of the memory the registry's own limit left it."""
    return {"out_of_memory": {"limit_bytes": limit, "needed_bytes": needed}}


def describe(config: dict) -> dict:
    model_type = config.get("model_type") or _model_type_of(config.get("architectures"))
    settings = {key: value for key, value in config.items() if key not in ("model_type", "auto_map")}
    built = AutoConfig.for_model(model_type, **settings)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(built, trust_remote_code=False)

    text = built.get_text_config()
    found: dict[tuple, list[int]] = defaultdict(list)
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            entry = ("linear", module.in_features, module.out_features, None)
        elif isinstance(module, Conv1D):  # GPT-2 style: the weight is (in, out)
            entry = ("linear", module.weight.shape[0], module.weight.shape[1], None)
        elif isinstance(module, torch.nn.Embedding):
            entry = ("embedding", module.num_embeddings, module.embedding_dim, None)
        else:
            continue
        _add(found, name, entry)
    layers_with_weights = (torch.nn.Linear, Conv1D, torch.nn.Embedding)
    for name, parameter in model.named_parameters():
        owner_name, _, parameter_name = name.rpartition(".")
        if parameter.dim() == 3:  # experts fused into one parameter: (experts, out, in) or (experts, in, out)
            experts, out_features, in_features = parameter.shape
            if _stored_in_first(model.get_submodule(owner_name), parameter_name, parameter.shape,
                                int(text.hidden_size)):
                experts, in_features, out_features = parameter.shape
            _add(found, name, ("expert_parameter", in_features, out_features, experts))
        elif (parameter.dim() == 2 and parameter_name == "weight"
              and not isinstance(model.get_submodule(owner_name), layers_with_weights)):
            # A router that holds its (experts, hidden) weight itself: peft targets it as a linear.
            _add(found, owner_name, ("linear", parameter.shape[1], parameter.shape[0], None))
    modules = [{"name": name, "kind": kind, "in_features": int(in_f), "out_features": int(out_f),
                "experts": None if experts is None else int(experts), "layers": layers}
               for (name, kind, in_f, out_f, experts), layers in found.items()]
    output, embedding = model.get_output_embeddings(), model.get_input_embeddings()
    return {"transformers": transformers.__version__, "architecture": _architecture(config, model),
            "hidden_size": int(text.hidden_size), "num_layers": int(text.num_hidden_layers),
            "vocab_size": int(text.vocab_size),
            "tied_embeddings": output is not None and output.weight is embedding.weight,
            "modules": modules, "renamed": _checkpoint_renames(model_type)}


def _architecture(config: dict, model: PreTrainedModel) -> str:
    """The class config.json names: vLLM picks its model class by it, and it may be spelled
    otherwise than transformers' (PhiMoEForCausalLM beside PhimoeForCausalLM)."""
    named = config.get("architectures")
    if isinstance(named, list) and named and isinstance(named[0], str):
        return named[0]
    return type(model).__name__


def _stored_in_first(owner, parameter_name: str, shape, hidden_size: int) -> bool:
    """Whether a 3-D expert parameter is stored (experts, in, out), as GPT-OSS and Llama 4 store
    theirs, rather than (experts, out, in) as Mixtral's. A module that says so (`is_transposed`)
    is believed; otherwise the residual stream tells: a down projection writes it, every other
    projection reads it. Where both sides are as wide, (experts, out, in) is assumed."""
    flag = getattr(owner, "is_transposed", None)
    if isinstance(flag, bool):
        return flag
    if parameter_name not in EXPERT_PROJECTIONS:
        return False  # a name whose role is unknown here: (experts, out, in), as most store them
    _, first, second = shape
    writes_residual = parameter_name in ("down_proj", "w2")
    hidden_first = first == hidden_size and second != hidden_size
    hidden_second = second == hidden_size and first != hidden_size
    return hidden_second if writes_residual else hidden_first


def _checkpoint_renames(model_type: str) -> list[list[str]]:
    """The module renames transformers applies when it loads this model type's checkpoints
    (its conversion mapping), as (checkpoint's segment, transformers' segment): the plain ones,
    which rename a module and nothing else."""
    try:
        from transformers.conversion_mapping import get_checkpoint_conversion_mapping
        from transformers.core_model_loading import WeightRenaming
    except ImportError:  # a transformers that renames nothing
        return []
    renames = []
    for rule in get_checkpoint_conversion_mapping(model_type) or []:
        if type(rule) is not WeightRenaming or len(rule.source_patterns) != 1 or len(rule.target_patterns) != 1:
            continue
        old, new = (_as_segment(rule.source_patterns[0]), _as_segment(rule.target_patterns[0]))
        if old and new:
            renames.append([old, new])
    return renames


def _as_segment(pattern: str) -> str | None:
    """`.block_sparse_moe.` as it is, `.gate.weight` as `.gate.` (a module's weight renamed is the
    module renamed); None for a pattern that is a regular expression or no whole segment."""
    segment = pattern.removesuffix("weight")
    return segment if SEGMENT_RENAME.fullmatch(segment) else None


def _model_type_of(architectures) -> str:
    """The model type whose causal-LM class config.json names, for a config saved without it."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    if isinstance(architectures, list) and architectures:
        for model_type, class_name in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items():
            if class_name == architectures[0]:
                return model_type
    raise ValueError(f"config.json has no 'model_type', and its architectures {architectures!r} name "
                     "no causal language model transformers knows")


def _add(found: dict, name: str, entry: tuple) -> None:
    """One row per module of the same shape in every layer: model.layers.*.self_attn.q_proj."""
    match = LAYER.search(name)
    if match is None:
        found[(name, *entry)] = []
        return
    pattern = name[:match.start()] + ".*." + name[match.end():]
    found[(pattern, *entry)].append(int(match.group(1)))


def _first_sentence(message: str, limit: int = 300) -> str:
    """transformers' messages can list every known model type: keep what says what is wrong."""
    first = message.strip().split("\n", 1)[0].split(". ", 1)[0]
    return first if len(first) <= limit else first[:limit] + "..."


def _quiet() -> None:
    """transformers' warnings about a config are not the registry's log: what went wrong is
    in the answer."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)
