"""The sizing arithmetic on a Llama-2-7B-shaped base, against figures worked out by hand."""

from __future__ import annotations

import pytest

from registry.base_models.module_table import ModuleEntry, ModuleTable
from registry.sizing import calculator
from registry.sizing.calculator import PoolFacts
from registry.sizing.schemas import SizingInputs

pytestmark = pytest.mark.fast

LAYERS = tuple(range(32))


def _linear(name: str, in_features: int, out_features: int, layers=LAYERS) -> ModuleEntry:
    return ModuleEntry(name, "linear", in_features, out_features, None, layers)


# Llama-2-7B's module table, as transformers derives it from its config.json.
LLAMA_2_7B = ModuleTable(
    architecture="LlamaForCausalLM", transformers="5.25.0", hidden_size=4096, num_layers=32,
    vocab_size=32000, tied_embeddings=False,
    modules=(ModuleEntry("model.embed_tokens", "embedding", 32000, 4096, None, ()),
             *(_linear(f"model.layers.*.self_attn.{m}_proj", 4096, 4096) for m in "qkvo"),
             _linear("model.layers.*.mlp.gate_proj", 4096, 11008),
             _linear("model.layers.*.mlp.up_proj", 4096, 11008),
             _linear("model.layers.*.mlp.down_proj", 11008, 4096),
             _linear("lm_head", 4096, 32000, ())))
# Per layer, sum of (in + out) over the 7 projections:
#   q, k, v, o: 4 x (4096 + 4096) = 32768;  gate, up, down: 3 x (4096 + 11008) = 45312
IN_PLUS_OUT = 78080
# Parameters: embeddings and lm_head 2 x 32000 x 4096 = 262_144_000; per layer
# 4 x 4096^2 + 3 x 4096 x 11008 + 2 x 4096 = 202_383_360, x 32 = 6_476_267_520; final norm 4096.
# 6_738_415_616 in all, Llama-2-7B's published count.
BASE_FP16 = 6_738_415_616 * 2


def facts(*, ranks=(8,), max_loras=4, max_lora_rank=16, max_cpu_loras=64, dtype="float16",
          tied=False) -> PoolFacts:
    return PoolFacts(pool="chat", base_model="llama-2-7b", table=LLAMA_2_7B, tied_embeddings=tied,
                     max_loras=max_loras, max_cpu_loras=max_cpu_loras, max_lora_rank=max_lora_rank,
                     dtype=dtype, active_ranks=tuple(ranks), active_bytes=1000 * len(ranks))


def test_lora_slots_count_every_projection_at_max_lora_rank():
    slots = calculator.size(facts(), SizingInputs()).lora_slots

    assert IN_PLUS_OUT * 16 * 2 * 32 == 79_953_920
    assert slots.per_slot.value == 79_953_920
    assert slots.total.value == 4 * 79_953_920 == 319_815_680
    assert slots.total.unit == "bytes" and slots.total.source == "measured"
    assert (slots.max_loras.value, slots.max_lora_rank.value, slots.dtype_bytes.value) == (4, 16, 2)


@pytest.mark.parametrize(("dtype", "size"), [("bfloat16", 2), ("float32", 4)])
def test_slot_memory_scales_with_the_pool_dtype(dtype, size):
    slots = calculator.size(facts(dtype=dtype), SizingInputs()).lora_slots
    assert slots.total.value == 4 * IN_PLUS_OUT * 16 * size * 32


def test_base_weights_count_lm_head_unless_tied():
    untied = calculator.size(facts(), SizingInputs()).comparison.base_weights
    tied = calculator.size(facts(tied=True), SizingInputs()).comparison.base_weights

    assert untied.value == BASE_FP16 == 13_476_831_232 and untied.source == "measured"
    assert tied.value == BASE_FP16 - 32000 * 4096 * 2
    assert "tied" in tied.note


def test_an_oversized_max_lora_rank_wastes_the_headroom_and_a_smaller_rank_is_recommended():
    waste = calculator.size(facts(ranks=(4, 8)), SizingInputs()).rank_waste

    assert waste.wasted.value == 4 * IN_PLUS_OUT * (16 - 8) * 2 * 32 == 159_907_840
    assert waste.wasted.source == "measured"
    assert waste.recommended_max_lora_rank.value == 8


def test_the_recommended_rank_is_the_next_one_vllm_accepts():
    waste = calculator.size(facts(ranks=(9,), max_lora_rank=64), SizingInputs()).rank_waste

    assert waste.wasted.value == 4 * IN_PLUS_OUT * (64 - 9) * 2 * 32
    assert waste.recommended_max_lora_rank.value == 16
    ranks = (1, 2, 16, 17, 512, 513)
    assert [calculator.recommended_rank(r) for r in ranks] == [1, 8, 16, 32, 512, None]


def test_without_active_adapters_there_is_no_waste_to_report():
    sizing = calculator.size(facts(ranks=()), SizingInputs())

    assert sizing.rank_waste.wasted.value is None
    assert "no active adapters" in sizing.rank_waste.wasted.note
    assert sizing.rank_waste.recommended_max_lora_rank.value is None
    assert sizing.active_set.versions.value == 0
    assert sizing.comparison.assumptions.adapters.value == 1
    assert sizing.comparison.assumptions.adapters.source == "assumed"  # a floor, not a count


def test_fifty_adapters_as_replicas_or_as_multi_lora_with_the_defaults():
    comparison = calculator.size(facts(ranks=(8,) * 50), SizingInputs()).comparison
    full, multi = comparison.full_replicas, comparison.multi_lora

    # Budget per GPU: 80 GiB x 0.5 = 42_949_672_960 bytes, so either replica fits one GPU.
    assert comparison.weights_budget_per_gpu.value == 40 * 2**30
    # Replicas: each adapter needs one (2500 / 50 tokens/s is under one replica's 2500).
    assert (full.replicas.value, full.gpus_per_replica.value, full.gpus.value) == (50, 1, 50)
    # Multi-LoRA: 2500 tokens/s at 2500 x 0.9 needs 2 replicas; 50 adapters fit 64 resident.
    assert (multi.replicas.value, multi.gpus_per_replica.value, multi.gpus.value) == (2, 1, 2)
    assert full.memory_per_replica.value == BASE_FP16
    assert multi.memory_per_replica.value == BASE_FP16 + 319_815_680
    assert (full.gpu_memory.value, multi.gpu_memory.value) == (4000, 160)
    # Cost per 1M tokens: GPUs x 2.50 / (2500 x 3600) x 1e6.
    assert full.cost_per_1m_tokens.value == pytest.approx(125 / 9)
    assert multi.cost_per_1m_tokens.value == pytest.approx(5 / 9)
    assert comparison.gpu_ratio.value == 25 and comparison.cost_ratio.value == pytest.approx(25)


def test_labels_follow_the_inputs():
    comparison = calculator.size(facts(ranks=(8,) * 3), SizingInputs()).comparison
    given = calculator.size(facts(ranks=(8,) * 3), SizingInputs(adapters=7)).comparison

    assert comparison.assumptions.adapters.source == "measured"
    assert comparison.assumptions.adapters.value == 3
    assert (given.assumptions.adapters.value, given.assumptions.adapters.source) == (7, "assumed")
    assert all(figure.source == "assumed" for name, figure in comparison.assumptions
               if name != "adapters")
    assert "(default)" in comparison.assumptions.gpu_hour_usd.note
    assert comparison.base_weights.source == "measured"
    assert comparison.multi_lora.memory_per_replica.source == "measured"  # base + slots
    assert comparison.multi_lora.gpus.source == "assumed"
    assert comparison.full_replicas.cost_per_1m_tokens.source == "assumed"


def test_a_base_larger_than_one_gpus_budget_spans_several_gpus_per_replica():
    inputs = SizingInputs(weights_fraction=0.1, adapters=3)
    comparison = calculator.size(facts(), inputs).comparison

    # Budget 80 GiB x 0.1 = 8_589_934_592: 13_476_831_232 and 13_796_646_912 both need 2 GPUs.
    assert comparison.full_replicas.gpus_per_replica.value == 2
    assert comparison.full_replicas.gpus.value == 3 * 2
    assert comparison.multi_lora.gpus_per_replica.value == 2
    assert comparison.multi_lora.gpus.value == 2 * 2  # 2500 tokens/s at 90% still needs 2


def test_demand_and_residency_add_replicas():
    busy = calculator.size(facts(), SizingInputs(adapters=2, demand_tokens_per_s=12000,
                                                 lora_throughput_penalty=0)).comparison
    many = calculator.size(facts(max_cpu_loras=64), SizingInputs(adapters=200)).comparison

    assert busy.full_replicas.replicas.value == 2 * 3  # 6000 tokens/s each, 2500 per replica
    assert busy.multi_lora.replicas.value == 5  # ceil(12000 / 2500)
    cost = busy.full_replicas.cost_per_1m_tokens.value
    assert cost == pytest.approx(6 * 2.5 / (12000 * 3600) * 1e6)
    assert many.multi_lora.replicas.value == 4  # ceil(200 / 64) to keep every adapter resident


def test_float_noise_does_not_round_up_to_another_gpu():
    assert 3 * 0.1 / 0.1 > 3
    assert calculator.whole(3 * 0.1 / 0.1) == 3
    assert calculator.whole(3.2) == 4 and calculator.whole(3.0) == 3
