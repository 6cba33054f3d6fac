"""Match every tensor to a module or expert parameter in the base's module table, with the shapes
vLLM will expect, and refuse what vLLM would not serve, naming the module and the reason.

The table comes from the base's real architecture (base_models/module_table.py); what vLLM
does with each module, from vLLM's own classes (base_models/vllm_support.py). A tensor for a
module the base does not have is refused: vLLM would load it and silently never apply it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from registry.adapters import tensor_names
from registry.adapters.module_scaling import Scaling
from registry.adapters.peft_config import LoraSpec
from registry.adapters.peft_targets import Targets
from registry.adapters.safetensors_check import TensorInfo, refuse
from registry.adapters.tensor_names import TensorName
from registry.base_models import vllm_support
from registry.base_models.module_table import ModuleEntry, ModuleTable
from registry.base_models.vllm_support import LoraFacts

BASE_LAYER = ".base_layer"
PER_EXPERT = re.compile(r"(?P<owner>.+)\.(?P<expert>[0-9]+)\.(?P<projection>[A-Za-z_]\w*)")
# Per-expert projection names (transformers 4 and vLLM's checkpoints) -> the 3-D parameter that
# holds them in the table, and which of its halves.
EXPERT_PROJECTIONS = {"gate_proj": ("gate_up_proj", 0), "w1": ("gate_up_proj", 0),
                      "up_proj": ("gate_up_proj", 1), "w3": ("gate_up_proj", 1),
                      "down_proj": ("down_proj", None), "w2": ("down_proj", None)}


@dataclass(frozen=True)
class Pair:
    """One module's (or expert parameter's) lora_A and lora_B, with peft's rank and scaling."""
    key: str
    form: str  # as Site.form
    a: TensorInfo
    b: TensorInfo
    scaling: Scaling
    expert: tuple[int, str] | None = None  # an expert_slice's expert and projection


@dataclass(frozen=True)
class LoraLayout:
    rank: int  # the largest a module may have (r, or a rank_pattern value): what vLLM checks
    modules: tuple[str, ...]  # short names of the modules with weights, e.g. ("q_proj", "v_proj")
    dtype: str
    tensor_count: int
    pairs: tuple[Pair, ...] = ()


@dataclass(frozen=True)
class Site:
    """What one lora_A / lora_B pair is the LoRA of."""
    key: str  # the module's path, or the expert parameter's
    entry: ModuleEntry
    form: str  # linear | embedding | experts_3d | expert_slice
    out_features: int  # the entry's, or one half of a fused gate_up parameter
    expert: tuple[int, str] | None = None  # an expert_slice's expert and projection


def check_layout(tensors: list[TensorInfo], spec: LoraSpec, table: ModuleTable) -> LoraLayout:
    targets = spec.targets()
    facts = vllm_support.facts_for(table.architecture)
    pairs: dict[str, tuple[Site, dict[str, TensorInfo]]] = {}
    for tensor in tensors:
        name = tensor_names.read(tensor)
        in_table = table.table_name(name.pattern)
        # Spelt as this transformers spells a module the checkpoints (and vLLM) name otherwise?
        checkpoint_name = table.checkpoint_name(name.module) if in_table == name.pattern else None
        site = _site(replace(name, pattern=in_table), tensor, table, targets)
        _check_served(site, tensor, table, facts, checkpoint_name)
        _, pair = pairs.setdefault(site.key, (site, {}))
        if name.side in pair:
            raise refuse(
                f"tensors {pair[name.side].name!r} and {tensor.name!r} are both lora_{name.side} of "
                f"{site.key!r}", code="duplicate_module",
                hint="Save each module's lora_A and lora_B once (peft's save_pretrained does).")
        pair[name.side] = tensor
        if not _targeted(site, name, table, targets):
            raise refuse(f"tensor {tensor.name!r} is for a module that target_modules does not target",
                         code="untargeted_module", hint="Add the module to target_modules, or drop it.")
    scaling = spec.scaling()
    checked = []
    for site, pair in pairs.values():
        module = scaling.of(site.key)
        _check_pair(site, pair, module.rank)
        checked.append(Pair(site.key, site.form, pair["A"], pair["B"], module, site.expert))
    _check_experts_complete([site for site, _ in pairs.values() if site.form == "expert_slice"])
    _check_targets_covered(table, targets, pairs)
    dtypes = sorted({t.dtype for t in tensors})
    if len(dtypes) > 1:
        raise refuse(f"tensors mix dtypes {', '.join(dtypes)}", code="mixed_dtypes",
                     hint="Save every LoRA tensor in one dtype.")
    return LoraLayout(rank=max([spec.r, *(spec.raw.get("rank_pattern") or {}).values()]),
                      modules=tuple(sorted({site.entry.short_name for site, _ in pairs.values()})),
                      dtype=dtypes[0], tensor_count=len(tensors), pairs=tuple(checked))


def refuse_uneven_expert_ranks(layout: LoraLayout) -> None:
    """What vLLM serves as uploaded: it stacks one projection of every expert into one LoRA of
    one rank, so a rank_pattern may not give experts different ranks (different alphas are
    fine, vLLM folds those into lora_B itself). A fold (scaling_fold.py) pads them to one rank."""
    first: dict[tuple[str, str], Pair] = {}
    for pair in layout.pairs:
        if pair.expert is None:
            continue
        projection = pair.expert[1]
        seen = first.setdefault((pair.key.rsplit(".", 2)[0], projection), pair)
        if seen.scaling.rank != pair.scaling.rank:
            raise refuse(
                f"{seen.key!r} has rank {seen.scaling.rank} but {pair.key!r} has rank {pair.scaling.rank}; "
                f"vLLM stacks every expert's {projection} into one LoRA of one rank", code="expert_ranks_differ",
                hint="Upload with fold_scaling=true, which pads them to one rank, or train every expert "
                     "at one rank.")


def _site(name: TensorName, tensor: TensorInfo, table: ModuleTable, targets: Targets) -> Site:
    entry = table.entry(name.pattern, name.layer)
    if entry is not None and entry.kind == ("embedding" if name.weight == "embedding" else "linear"):
        _check_layer(name, tensor, entry)
        return Site(name.module, entry, name.weight if name.weight == "embedding" else "linear",
                    entry.out_features)
    if name.weight == "lora":
        owner, hops = _unnest(name.pattern)
        parameters = table.expert_parameters(owner)
        if parameters:
            return _expert_parameter(name, tensor, owner, hops, parameters, targets)
        if (slice_ := PER_EXPERT.fullmatch(name.pattern)) and table.expert_parameters(slice_["owner"]):
            return _expert_slice(name, tensor, slice_, table)
    modules = sorted({e.short_name for e in table.modules})
    raise refuse(
        f"tensor {tensor.name!r} is for module {name.module!r}, which {table.architecture} does not "
        f"have{' as an embedding' if entry is not None else ''}; vLLM would load it and never apply it",
        code="unknown_module",
        hint=f"Modules of this base: {', '.join(modules[:40])}{' ...' if len(modules) > 40 else ''}.")


def _unnest(pattern: str) -> tuple[str, int]:
    """peft nests one wrapper per targeted parameter of a module: `experts.base_layer` is the
    one targeted first."""
    hops = 0
    while pattern.endswith(BASE_LAYER):
        pattern, hops = pattern[:-len(BASE_LAYER)], hops + 1
    return pattern, hops


def _expert_parameter(name: TensorName, tensor: TensorInfo, owner: str, hops: int,
                      parameters: list[ModuleEntry], targets: Targets) -> Site:
    module = name.module[:len(name.module) - hops * len(BASE_LAYER)]
    targeted = [p for p in parameters if targets.parameter(f"{module}.{p.short_name}")]
    if not targeted:
        raise refuse(f"tensor {tensor.name!r} is for the expert parameters of {module!r}, which "
                     "target_parameters does not list", code="untargeted_module",
                     hint=f"List them in target_parameters ({', '.join(p.short_name for p in parameters)}).")
    if hops >= len(targeted):
        raise refuse(f"tensor {tensor.name!r} nests {hops} base_layer wrappers, but target_parameters "
                     f"targets {len(targeted)} parameter(s) of {module!r}", code="unknown_module",
                     hint="Save the adapter with peft's save_pretrained.")
    entry = targeted[len(targeted) - 1 - hops]  # the one targeted last is outermost
    _check_layer(name, tensor, entry)
    return Site(f"{module}.{entry.short_name}", entry, "experts_3d", entry.out_features)


def _expert_slice(name: TensorName, tensor: TensorInfo, found: re.Match, table: ModuleTable) -> Site:
    parameter, half = EXPERT_PROJECTIONS.get(found["projection"], (None, None))
    entry = table.entry(f"{found['owner']}.{parameter}", name.layer) if parameter else None
    if entry is None or int(found["expert"]) >= (entry.experts or 0):
        raise refuse(f"tensor {tensor.name!r} is for expert module {name.module!r}, which "
                     f"{table.architecture} does not have", code="unknown_module",
                     hint="Expert projections are gate_proj, up_proj and down_proj (or w1, w3, w2), "
                          "numbered from 0 below the number of experts.")
    _check_layer(name, tensor, entry)
    out_features = entry.out_features // 2 if half is not None else entry.out_features
    projection = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}.get(found["projection"],
                                                                              found["projection"])
    return Site(name.module, entry, "expert_slice", out_features, (int(found["expert"]), projection))


def _check_layer(name: TensorName, tensor: TensorInfo, entry: ModuleEntry) -> None:
    if name.layer is not None and name.layer not in entry.layers:
        where = (f"{len(entry.layers)} layers" if entry.layers == tuple(range(len(entry.layers)))
                 else f"{entry.short_name} only in layers {', '.join(map(str, entry.layers))}")
        raise refuse(f"tensor {tensor.name!r} is for layer {name.layer}, but the base has {where}",
                     code="layer_out_of_range", hint="The adapter was trained on a different base model.")


def _check_served(site: Site, tensor: TensorInfo, table: ModuleTable, facts: LoraFacts | None,
                  checkpoint_name: str | None) -> None:
    """What vLLM's class for this architecture refuses, or would load and never apply."""
    if facts is None:
        return  # an architecture vLLM's facts do not cover: the pool's engine judges it
    short = site.entry.short_name
    why = None
    output_embedding = site.form == "linear" and table.is_output_embedding(site.entry)
    if (site.form == "embedding" or output_embedding) and short not in facts.embedding_modules:
        why = f"vLLM {vllm_support.version()} serves no LoRA on {short} for {table.architecture}"
    elif site.form == "linear" and short in facts.packed_modules and short not in facts.packed_modules[short]:
        parts = ", ".join(facts.packed_modules[short])
        why = f"vLLM {vllm_support.version()} builds {short} from {parts} and takes their LoRAs, not {short}'s"
    elif short in facts.absorbed_modules:
        why = (f"vLLM {vllm_support.version()} folds {short}'s weight into {table.architecture}'s latent "
               "attention, so a LoRA on it would be loaded and never applied as trained")
    elif site.form == "experts_3d" and not facts.experts_3d:
        why = (f"vLLM {vllm_support.version()} takes expert LoRAs for {table.architecture} one "
               "expert at a time (experts.N.gate_proj, up_proj, down_proj), not as 3-D tensors")
    elif checkpoint_name is not None:
        why = (f"{table.architecture}'s checkpoints, and vLLM {vllm_support.version()}, name this module "
               f"{checkpoint_name!r}; under transformers {table.transformers}'s name {site.key!r} vLLM "
               "would load the LoRA and never apply it")
    if why:
        raise refuse(f"tensor {tensor.name!r}: {why}", code="module_not_served",
                     hint="Train without this module; docs/families.md lists what vLLM serves per family.")


def _targeted(site: Site, name: TensorName, table: ModuleTable, targets: Targets) -> bool:
    if site.form == "experts_3d":
        return True  # _expert_parameter found it in target_parameters
    if site.form == "linear" and targets.parameter(f"{name.module}.weight"):
        return True
    return targets.module(name.module, linear=site.form == "linear" and not table.is_output_embedding(site.entry))


def _check_pair(site: Site, pair: dict[str, TensorInfo], rank: int) -> None:
    if set(pair) != {"A", "B"}:
        missing = "lora_B" if "A" in pair else "lora_A"
        raise refuse(f"module {site.key!r} has no {missing} tensor", code="incomplete_pair")
    a, b = pair["A"], pair["B"]
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise refuse(f"module {site.key!r}: lora_A and lora_B must be 2-D, got {a.shape} and {b.shape}",
                     code="shape_mismatch")
    experts = _experts(site)
    if a.shape[0] != b.shape[1]:
        raise refuse(f"module {site.key!r}: lora_A has rank {a.shape[0]} but lora_B has rank {b.shape[1]}",
                     code="rank_mismatch")
    if a.shape[0] != rank * experts:
        stored = a.shape[0] / experts
        raise refuse(
            f"module {site.key!r} has rank {stored:g} but adapter_config.json says {rank}; "
            "vLLM would scale it wrongly", code="config_rank_mismatch",
            hint="Fix r (or the module's rank_pattern entry) in adapter_config.json to match the weights.")
    in_features, out_features = site.entry.in_features, site.out_features
    width = rank * experts
    if a.shape[1] != in_features or b.shape[0] != out_features:
        what = f"{site.entry.kind} of {experts} experts" if experts > 1 else site.entry.kind
        raise refuse(
            f"module {site.key!r} ({what}): expected lora_A ({width}, {in_features}) and lora_B "
            f"({out_features}, {width}), got {a.shape} and {b.shape}", code="shape_mismatch",
            hint="The adapter was trained on a base with other dimensions.")


def _experts(site: Site) -> int:
    """The experts one pair covers: an experts_3d parameter's count (its table entry's), else 1."""
    if site.form != "experts_3d":
        return 1
    if site.entry.experts is None:
        raise ValueError(f"module table entry of {site.key!r} is an expert parameter without a count")
    return site.entry.experts


def _check_experts_complete(slices: list[Site]) -> None:
    """vLLM stacks per-expert LoRAs into one tensor: every expert needs all three projections."""
    by_owner: dict[str, dict[tuple[int, str], str]] = {}
    owners: dict[str, Site] = {}
    for site in slices:
        owner = site.key.rsplit(".", 2)[0]
        found = by_owner.setdefault(owner, {})
        if site.expert is None:
            raise ValueError(f"expert slice {site.key!r} names no expert")
        if site.expert in found:  # w1 and gate_proj (w3 and up_proj, w2 and down_proj) name one projection
            expert, projection = site.expert
            raise refuse(f"{found[site.expert]!r} and {site.key!r} are both expert {expert}'s {projection}; "
                         "vLLM would serve one of them", code="duplicate_module",
                         hint="Save each expert projection once, under one naming (w1/w2/w3 or "
                              "gate_proj/down_proj/up_proj).")
        found[site.expert] = site.key
        owners[owner] = site
    for owner, found in sorted(by_owner.items()):
        experts = owners[owner].entry.experts or 0
        needed = {(e, p) for e in range(experts) for p in ("gate_proj", "up_proj", "down_proj")}
        missing = sorted(needed - set(found))
        if missing:
            expert, projection = missing[0]
            raise refuse(
                f"{owner!r} has LoRAs for some experts but none for expert {expert}'s {projection} "
                f"({len(missing)} missing); vLLM needs gate_proj, up_proj and down_proj for every one "
                f"of the {experts} experts", code="incomplete_experts",
                hint="Target every expert projection, as peft does for target_modules naming them.")


def _check_targets_covered(table: ModuleTable, targets: Targets, pairs: dict) -> None:
    """What the config targets, peft saves: a targeted module without tensors means the config
    and the weights disagree (layers_to_transform, most often)."""
    for entry in table.modules:
        linear = entry.kind == "linear" and not table.is_output_embedding(entry)
        for layer in entry.layers or (None,):
            path = entry.name if layer is None else entry.name.replace(".*.", f".{layer}.", 1)
            # peft matched the config's rules against the names of the model it trained on:
            # the checkpoints' or this transformers'. A module both would target needs tensors.
            spellings = [name for name in (path, table.checkpoint_name(path)) if name is not None]
            if entry.kind == "expert_parameter":
                targeted = all(targets.parameter(name) for name in spellings)
            else:
                targeted = all(targets.module(name, linear=linear) for name in spellings)
            if targeted and not any(name in pairs for name in spellings):
                raise refuse(
                    f"adapter_config.json targets {path!r}, but no tensor is saved for it",
                    code="target_without_tensors",
                    hint="Save the adapter again, or correct target_modules, target_parameters or "
                         "layers_to_transform to the modules it was trained on.")
    # peft saves a list naming modules a family lacks (Llama's names on Phi-3), as long as one
    # of them matched: only a list that matched nothing is refused.
    if targets.listed and not any(key == target or key.endswith("." + target)
                                  for target in targets.listed for key in pairs):
        raise refuse(f"target_modules lists {', '.join(map(repr, targets.listed[:5]))} but no "
                     "tensor is saved for any of them", code="target_without_tensors",
                     hint="Save the adapter again, or correct target_modules.")
