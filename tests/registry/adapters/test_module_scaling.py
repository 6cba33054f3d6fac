"""Each module's rank and alpha are the ones peft gives it: the registry's one-regex-per-dict
matching is compared with peft's own get_pattern_key over many key sets and module paths."""

from __future__ import annotations

import random

import pytest
from peft.utils.other import get_pattern_key

from registry.adapters import target_regex
from registry.adapters.module_scaling import ModuleScaling
from registry.adapters.peft_config import refuse

pytestmark = pytest.mark.fast

PATHS = [f"model.layers.{layer}.{module}" for layer in (0, 1, 10, 11)
         for module in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "mlp.experts.3.w1",
                        "mlp.experts.gate_up_proj")] + ["lm_head", "model.embed_tokens"]
# Keys that overlap: a later key may match where an earlier one matches with a shorter prefix.
KEYS = ["q_proj", r"self_attn\.q_proj", "proj", r"layers\.1\.mlp\..*", r"layers\.1\d?\..*", "v_proj|o_proj",
        "mlp", "w1", r"experts\.\d\.w1", ".*_proj", "embed_tokens", "lm_head", "layers.1.mlp.down_proj",
        r"(self_attn|mlp)\.(q|down)_proj", "k_proj$", r"experts\.gate_up_proj", r"1\.self_attn\.q_proj"]


@pytest.mark.parametrize("seed", range(40))
def test_the_first_key_peft_would_take_is_the_one_applied(seed):
    picked = random.Random(seed).sample(KEYS, random.Random(seed + 1000).randint(1, 8))
    ranks = {key: i + 1 for i, key in enumerate(picked)}
    alphas = {key: 10.0 * (i + 1) for i, key in enumerate(reversed(picked))}
    for key in picked:
        target_regex.check(key, refuse, "key", key=True)
    scaling = ModuleScaling(64, 640.0, False, ranks, alphas, refuse)

    for path in PATHS:
        module = scaling.of(path)
        assert (module.rank, module.alpha) == (ranks.get(get_pattern_key(list(ranks), path), 64),
                                               alphas.get(get_pattern_key(list(alphas), path), 640.0)), path


def test_rslora_scales_by_the_square_root_of_each_module_rank():
    scaling = ModuleScaling(16, 32, True, {"q_proj": 4}, {}, refuse)

    assert scaling.of("model.layers.0.self_attn.q_proj").factor == 32 / 2
    assert scaling.of("model.layers.0.self_attn.v_proj").factor == 32 / 4
