"""Read a saved tensor's name the way peft writes it: the module it belongs to, the layer that
module is in, and which LoRA weight it is. Names peft writes for what vLLM never serves (DoRA
magnitudes, LoRA biases, full embedding weights) are refused here, each with its reason."""

from __future__ import annotations

import re
from dataclasses import dataclass

from registry.adapters.safetensors_check import TensorInfo, refuse

PREFIX = "base_model.model."  # PeftModel.save_pretrained's; vLLM also reads names without it
# suffix -> (the weight it is, lora_A or lora_B)
LORA_WEIGHTS = {".lora_A.weight": ("lora", "A"), ".lora_B.weight": ("lora", "B"),
                ".lora_embedding_A": ("embedding", "A"), ".lora_embedding_B": ("embedding", "B")}
NOT_SERVED = {
    ".lora_magnitude_vector": ("is a DoRA magnitude; vLLM does not serve DoRA", "dora_unsupported",
                               "Train without use_dora, or merge the adapter into the base."),
    ".lora_B.bias": ("is a LoRA bias; vLLM does not serve LoRA biases", "lora_bias_unsupported",
                     "Train with lora_bias=False."),
    ".base_layer.weight": ("is a full base weight that peft saved beside the LoRA (it does for a "
                           "targeted embedding, or a resized vocabulary); vLLM drops it, and "
                           "serves the base's own", "full_weights_unsupported",
                           "Save with save_pretrained(save_embedding_layers=False), on a base "
                           "with the registered vocabulary."),
}
SEGMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}|[0-9]{1,6}", re.ASCII)
# As peft writes numbers: no leading zero. int() would also read "00" as 0, and two tensors for
# one module would then pass with only one of them checked.
CANONICAL_NUMBER = re.compile(r"0|[1-9][0-9]{0,5}", re.ASCII)


@dataclass(frozen=True)
class TensorName:
    module: str  # model.layers.3.self_attn.q_proj
    pattern: str  # model.layers.*.self_attn.q_proj: the module table's name for it
    layer: int | None  # None: a module outside the layers (lm_head)
    weight: str  # "lora" (lora_A/B.weight) or "embedding" (lora_embedding_A/B)
    side: str  # "A" or "B"


def read(tensor: TensorInfo) -> TensorName:
    name = tensor.name.removeprefix(PREFIX)
    for suffix, (why, code, hint) in NOT_SERVED.items():
        if name.endswith(suffix):
            raise refuse(f"tensor {tensor.name!r} {why}", code=code, hint=hint)
    for suffix, (weight, side) in LORA_WEIGHTS.items():  # noqa: B007 (read after the break)
        if name.endswith(suffix):
            module = name[:-len(suffix)]
            break
    else:
        raise refuse(f"tensor {tensor.name!r} is not a LoRA weight", code="unknown_tensor",
                     hint="Expected names as peft saves them, such as "
                          "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight.")
    segments = module.split(".")
    numbers = [i for i, segment in enumerate(segments) if segment.isdigit()]  # any script's digits
    for i in numbers:
        if CANONICAL_NUMBER.fullmatch(segments[i]) is None:
            what = "its layer number" if i == numbers[0] else "a number"
            raise refuse(f"tensor {tensor.name!r} writes {what} as {segments[i]!r}",
                         code="invalid_layer_number",
                         hint="Write layer numbers in ASCII digits without leading zeros, as peft saves them.")
    if not all(SEGMENT.fullmatch(segment) for segment in segments):
        raise refuse(f"tensor {tensor.name!r} does not name a module", code="unknown_tensor",
                     hint="Module names are dotted names of letters, digits and '_', as peft saves them.")
    if not numbers:
        return TensorName(module, module, None, weight, side)
    first = numbers[0]  # the layer; a later number is an expert's
    pattern = ".".join([*segments[:first], "*", *segments[first + 1:]])
    return TensorName(module, pattern, int(segments[first]), weight, side)
