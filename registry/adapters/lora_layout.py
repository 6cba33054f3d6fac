"""Match every tensor to a real projection of the base, with the shapes vLLM will expect."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from registry.adapters.peft_config import LoraSpec
from registry.adapters.safetensors_check import TensorInfo, refuse
from registry.base_models.shapes import BaseShape

# The layer is taken loosely here and checked by CANONICAL_LAYER, for a message that names it.
TENSOR_NAME = re.compile(
    r"base_model\.model\.model\.layers\.(?P<layer>[^.]{1,20})\.(?P<parent>\w+)\.(?P<module>\w+)"
    r"\.lora_(?P<side>[AB])\.weight", re.ASCII,
)
# As PEFT writes it: ASCII digits, no leading zero. int() would also read "00" or "\u0660" as 0,
# and two tensors for one module would then pass with only one of them checked.
CANONICAL_LAYER = re.compile(r"0|[1-9][0-9]{0,5}", re.ASCII)


@dataclass(frozen=True)
class LoraLayout:
    rank: int
    modules: tuple[str, ...]  # module names that carry weights, e.g. ("q_proj", "v_proj")
    dtype: str
    tensor_count: int


def check_layout(tensors: list[TensorInfo], spec: LoraSpec, base: BaseShape) -> LoraLayout:
    pairs: dict[str, dict[str, TensorInfo]] = {}
    projections = base.projections()
    for tensor in tensors:
        module_path, side = _locate(tensor, base, projections)
        pair = pairs.setdefault(module_path, {})
        if side in pair:
            raise refuse(
                f"tensors {pair[side].name!r} and {tensor.name!r} are both lora_{side} of module "
                f"{module_path!r}", code="duplicate_module",
                hint="Save each module's lora_A and lora_B once (peft's save_pretrained does).",
            )
        pair[side] = tensor
    targeted = spec.target_matcher()
    for path, pair in sorted(pairs.items()):
        _check_pair(path, pair, spec, projections, targeted)
    _check_targets_covered(spec, pairs)
    dtypes = sorted({t.dtype for t in tensors})
    if len(dtypes) > 1:
        raise refuse(f"tensors mix dtypes {', '.join(dtypes)}", code="mixed_dtypes",
                     hint="Save every LoRA tensor in one dtype.")
    return LoraLayout(
        rank=spec.r,
        modules=tuple(sorted({path.rsplit(".", 1)[1] for path in pairs})),
        dtype=dtypes[0],
        tensor_count=len(tensors),
    )


def _locate(tensor: TensorInfo, base: BaseShape, projections: dict) -> tuple[str, str]:
    match = TENSOR_NAME.fullmatch(tensor.name)
    if match is None:
        raise refuse(
            f"tensor {tensor.name!r} is not a LoRA weight of a decoder-layer projection",
            code="unknown_tensor",
            hint="Expected names like base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight.",
        )
    if CANONICAL_LAYER.fullmatch(match["layer"]) is None:
        raise refuse(
            f"tensor {tensor.name!r} writes its layer number as {match['layer']!r}",
            code="invalid_layer_number",
            hint="Write layer numbers in ASCII digits without leading zeros, as peft saves them.",
        )
    layer, parent, module = int(match["layer"]), match["parent"], match["module"]
    if module not in projections or base.module_parent(module) != parent:
        raise refuse(
            f"tensor {tensor.name!r} targets {parent}.{module}, which {base.architecture} does not have",
            code="unknown_module",
            hint=f"Target modules of this base: {', '.join(projections)}.",
        )
    if layer >= base.num_layers:
        raise refuse(
            f"tensor {tensor.name!r} is for layer {layer}, but the base has {base.num_layers} layers",
            code="layer_out_of_range",
            hint="The adapter was trained on a different base model.",
        )
    return f"model.layers.{layer}.{parent}.{module}", match["side"]


def _check_pair(path: str, pair: dict[str, TensorInfo], spec: LoraSpec, projections: dict,
                targeted: Callable[[str], bool]) -> None:
    if set(pair) != {"A", "B"}:
        missing = "lora_B" if "A" in pair else "lora_A"
        raise refuse(f"module {path!r} has no {missing} tensor", code="incomplete_pair")
    a, b = pair["A"], pair["B"]
    if not targeted(path):
        raise refuse(f"tensor {a.name!r} is for a module that target_modules does not list",
                     code="untargeted_module", hint="Add the module to target_modules, or drop it.")
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise refuse(f"module {path!r}: lora_A and lora_B must be 2-D, got {a.shape} and {b.shape}",
                     code="shape_mismatch")
    if a.shape[0] != b.shape[1]:
        raise refuse(
            f"module {path!r}: lora_A has rank {a.shape[0]} but lora_B has rank {b.shape[1]}",
            code="rank_mismatch",
        )
    expected_rank = spec.r
    if a.shape[0] != expected_rank:
        raise refuse(
            f"module {path!r} has rank {a.shape[0]} but adapter_config.json says {expected_rank}; "
            "vLLM would scale it wrongly",
            code="config_rank_mismatch",
            hint="Fix r in adapter_config.json to match the weights.",
        )
    in_features, out_features = projections[path.rsplit(".", 1)[1]]
    if a.shape[1] != in_features or b.shape[0] != out_features:
        raise refuse(
            f"module {path!r}: expected lora_A ({expected_rank}, {in_features}) and lora_B "
            f"({out_features}, {expected_rank}), got {a.shape} and {b.shape}",
            code="shape_mismatch",
            hint="The adapter was trained on a base with other dimensions.",
        )


def _check_targets_covered(spec: LoraSpec, pairs: dict) -> None:
    if isinstance(spec.target_modules, str):
        return  # a regex has matched at least one module, or _check_pair would have refused
    for target in spec.target_modules:
        if not any(path == target or path.endswith("." + target) for path in pairs):
            raise refuse(
                f"target_modules lists {target!r} but no tensor is saved for it",
                code="target_without_tensors",
                hint="Save the adapter again, or remove the module from target_modules.",
            )
