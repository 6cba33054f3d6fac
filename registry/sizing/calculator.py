"""The sizing arithmetic. Pure: it takes what service.py read from the database (PoolFacts) and
the caller's assumptions, and labels each figure: measured when it follows from the registered
config and the pool alone, assumed as soon as any assumption enters it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from registry.base_models.module_table import ModuleTable
from registry.pools.schemas import VLLM_MAX_LORA_RANKS
from registry.sizing.schemas import (
    ActiveSetFigures, Assumptions, Comparison, Deployment, Figure, LoraSlots, RankWaste,
    SizingInputs, SizingOut,
)

GIB = 2**30
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
DEFAULT_GPU_HOUR_USD = 2.50
DEFAULT_GPU_MEMORY_GIB = 80.0
DEFAULT_TOKENS_PER_S = 2500.0
DEFAULT_LORA_THROUGHPUT_PENALTY = 0.10  # DESIGN.md: multi-LoRA costs 5-15% throughput
DEFAULT_WEIGHTS_FRACTION = 0.5


@dataclass(frozen=True)
class PoolFacts:
    pool: str
    base_model: str
    table: ModuleTable
    tied_embeddings: bool
    max_loras: int
    max_cpu_loras: int
    max_lora_rank: int
    dtype: str
    active_ranks: tuple[int, ...]  # one per version in the active set
    active_bytes: int


@dataclass(frozen=True)
class Fleet:
    replicas: int
    gpus_per_replica: int

    @property
    def gpus(self) -> int:
        return self.replicas * self.gpus_per_replica


def lora_slot_bytes(table: ModuleTable, *, slots: int, rank: int, dtype_bytes: int) -> int:
    # vLLM preallocates the A (in x r) and B (r x out) buffers of every module in the layers that
    # it supports (each expert's, for expert parameters), for each of max_loras slots at
    # max_lora_rank, whatever modules the loaded adapters target: so every one counts.
    per_rank = sum((entry.in_features + entry.out_features) * (entry.experts or 1) * len(entry.layers)
                   for entry in table.modules if entry.layers)
    return slots * per_rank * rank * dtype_bytes


def base_weight_bytes(table: ModuleTable, *, tied_embeddings: bool, dtype_bytes: int) -> int:
    # Every module's weights from the table (embeddings, linears, experts), an output embedding
    # tied to the input one counted once, and two norm vectors per layer and a final one.
    # Biases (Qwen2's q/k/v) and rotary caches are left out: well under 0.1% of the weights.
    weights = sum(entry.weight_count() for entry in table.modules
                  if not (tied_embeddings and table.is_output_embedding(entry)))
    norms = (2 * table.num_layers + 1) * table.hidden_size
    return (weights + norms) * dtype_bytes


def recommended_rank(largest: int) -> int | None:
    return next((rank for rank in VLLM_MAX_LORA_RANKS if rank >= largest), None)


def whole(count: float) -> int:
    """Round up, after dropping float noise: 3 * 0.1 / 0.1 is 3.0000000000000004, not 4."""
    return math.ceil(round(count, 9))


def full_replicas_fleet(*, adapters: int, demand: float, tokens_per_s: float,
                        replica_bytes: int, budget_bytes: float) -> Fleet:
    # Merged weights serve one adapter each: every adapter needs replicas of its own, sized for
    # its share of the demand.
    each = max(1, whole(demand / adapters / tokens_per_s))
    return Fleet(adapters * each, whole(replica_bytes / budget_bytes))


def multi_lora_fleet(*, adapters: int, demand: float, tokens_per_s: float, penalty: float,
                     max_cpu_loras: int, replica_bytes: int, budget_bytes: float) -> Fleet:
    # Enough replicas for the demand at the multi-LoRA throughput cost, and enough to keep every
    # adapter resident somewhere, max_cpu_loras per replica.
    for_demand = whole(demand / (tokens_per_s * (1 - penalty)))
    replicas = max(1, for_demand, whole(adapters / max_cpu_loras))
    return Fleet(replicas, whole(replica_bytes / budget_bytes))


def cost_per_1m_tokens(gpus: int, *, gpu_hour_usd: float, demand: float) -> float:
    return gpus * gpu_hour_usd / (demand * 3600) * 1e6


def size(facts: PoolFacts, inputs: SizingInputs) -> SizingOut:
    dtype_bytes = _measured(DTYPE_BYTES[facts.dtype], "bytes",
                            f"per parameter in {facts.dtype}, the pool's dtype")
    slots = _lora_slots(facts, dtype_bytes)
    assumptions = _assumptions(inputs, len(facts.active_ranks))
    return SizingOut(
        pool=facts.pool, base_model=facts.base_model, dtype=facts.dtype,
        active_set=_active_set(facts), lora_slots=slots,
        rank_waste=_rank_waste(facts, dtype_bytes),
        comparison=_comparison(facts, assumptions, dtype_bytes, slots.total))


def _number(figure: Figure) -> int | float:
    """The value of a figure computed with: every assumption has one, and so has each figure
    derived from them and from the pool's config."""
    if figure.value is None:
        raise ValueError(f"sizing computed with a figure that has no value: {figure.note}")
    return figure.value


def _count(figure: Figure) -> int:
    """The value of a figure that counts something (bytes, adapters): an int."""
    value = _number(figure)
    if not isinstance(value, int):
        raise TypeError(f"sizing expected a count, got {value!r}: {figure.note}")
    return value


def _measured(value, unit: str, note: str) -> Figure:
    return Figure(value=value, unit=unit, source="measured", note=note)


def _derived(value, unit: str, note: str, *inputs: Figure) -> Figure:
    source = "assumed" if any(figure.source == "assumed" for figure in inputs) else "measured"
    return Figure(value=value, unit=unit, source=source, note=note)


def _assumed(given, default, unit: str, about: str, default_is: str = "default") -> Figure:
    value, how = (default, default_is) if given is None else (given, "given")
    return Figure(value=value, unit=unit, source="assumed", note=f"{about} ({how})")


def _active_set(facts: PoolFacts) -> ActiveSetFigures:
    largest = max(facts.active_ranks, default=None)
    return ActiveSetFigures(
        versions=_measured(len(facts.active_ranks), "adapters",
                           "versions behind an alias or still retiring in this pool"),
        largest_rank=_measured(largest, "rank", "the largest rank in the active set"
                               if largest is not None else "the active set is empty"),
        artifact_bytes=_measured(facts.active_bytes, "bytes",
                                 "the active set's artifacts, held in each node's host memory"))


def _lora_slots(facts: PoolFacts, dtype_bytes: Figure) -> LoraSlots:
    one = lora_slot_bytes(facts.table, slots=1, rank=facts.max_lora_rank,
                          dtype_bytes=_count(dtype_bytes))
    return LoraSlots(
        max_loras=_measured(facts.max_loras, "slots", "the pool's --max-loras"),
        max_lora_rank=_measured(facts.max_lora_rank, "rank", "the pool's --max-lora-rank"),
        dtype_bytes=dtype_bytes,
        per_slot=_measured(one, "bytes", "sum over every module in the layers (each expert's too) of "
                                         "(in + out) x max_lora_rank: vLLM preallocates all of them"),
        total=_measured(facts.max_loras * one, "bytes", "max_loras x one slot, on each replica"))


def _rank_waste(facts: PoolFacts, dtype_bytes: Figure) -> RankWaste:
    largest = max(facts.active_ranks, default=None)
    if largest is None:
        why = "no active adapters: no rank to compare max_lora_rank with"
        return RankWaste(wasted=_measured(None, "bytes", why),
                         recommended_max_lora_rank=_measured(None, "rank", why))
    wasted = lora_slot_bytes(facts.table, slots=facts.max_loras,
                             rank=max(0, facts.max_lora_rank - largest),
                             dtype_bytes=_count(dtype_bytes))
    return RankWaste(
        wasted=_measured(wasted, "bytes", f"slots preallocated at rank {facts.max_lora_rank} "
                                          f"while the largest active rank is {largest}"),
        recommended_max_lora_rank=_measured(
            recommended_rank(largest), "rank",
            f"the smallest --max-lora-rank vLLM accepts that holds rank {largest}"))


def _assumptions(inputs: SizingInputs, active_versions: int) -> Assumptions:
    tokens = _assumed(inputs.tokens_per_s, DEFAULT_TOKENS_PER_S, "tokens/s",
                      "throughput of one GPU replica of the base")
    if inputs.adapters is not None:
        adapters = _assumed(inputs.adapters, None, "adapters", "adapters to serve")
    elif active_versions:
        adapters = _measured(active_versions, "adapters", "adapters to serve: the active set")
    else:  # 1 is a floor, not a count
        adapters = _assumed(None, 1, "adapters", "adapters to serve: the active set is empty")
    return Assumptions(
        gpu_hour_usd=_assumed(inputs.gpu_hour_usd, DEFAULT_GPU_HOUR_USD, "USD/hour",
                              "price of one GPU hour"),
        gpu_memory_gib=_assumed(inputs.gpu_memory_gib, DEFAULT_GPU_MEMORY_GIB, "GiB",
                                "memory of one GPU"),
        tokens_per_s=tokens,
        lora_throughput_penalty=_assumed(
            inputs.lora_throughput_penalty, DEFAULT_LORA_THROUGHPUT_PENALTY, "fraction",
            "throughput lost to multi-LoRA kernels, 5-15%"),
        demand_tokens_per_s=_assumed(inputs.demand_tokens_per_s, tokens.value, "tokens/s",
                                     "total demand across adapters", "default: tokens_per_s"),
        weights_fraction=_assumed(inputs.weights_fraction, DEFAULT_WEIGHTS_FRACTION, "fraction",
                                  "share of a GPU's memory for weights; the rest is KV cache"),
        adapters=adapters)


def _comparison(facts: PoolFacts, a: Assumptions, dtype_bytes: Figure,
                slot_total: Figure) -> Comparison:
    base_bytes = base_weight_bytes(facts.table, tied_embeddings=facts.tied_embeddings,
                                   dtype_bytes=_count(dtype_bytes))
    lm_head = "lm_head tied to them" if facts.tied_embeddings else "lm_head"
    base = _measured(base_bytes, "bytes",
                     f"every module in the base's module table ({lm_head}), "
                     "2 norms per layer, final norm")
    with_slots = _derived(base_bytes + _count(slot_total), "bytes", "base weights + LoRA slots",
                          base, slot_total)
    budget = _derived(_number(a.gpu_memory_gib) * GIB * _number(a.weights_fraction), "bytes",
                      "gpu_memory_gib x weights_fraction", a.gpu_memory_gib, a.weights_fraction)
    adapters, demand = _count(a.adapters), _number(a.demand_tokens_per_s)
    tokens_per_s, budget_bytes = _number(a.tokens_per_s), _number(budget)
    full = _deployment(
        full_replicas_fleet(replica_bytes=base_bytes, adapters=adapters, demand=demand,
                            tokens_per_s=tokens_per_s, budget_bytes=budget_bytes),
        base, budget, a,
        "adapters x max(1, ceil(demand / adapters / tokens_per_s))",
        a.adapters, a.demand_tokens_per_s, a.tokens_per_s)
    multi = _deployment(
        multi_lora_fleet(replica_bytes=_count(with_slots), max_cpu_loras=facts.max_cpu_loras,
                         penalty=_number(a.lora_throughput_penalty), adapters=adapters,
                         demand=demand, tokens_per_s=tokens_per_s, budget_bytes=budget_bytes),
        with_slots, budget, a,
        "max(1, ceil(demand / (tokens_per_s x (1 - penalty))), "
        f"ceil(adapters / max_cpu_loras {facts.max_cpu_loras}))",
        a.adapters, a.demand_tokens_per_s, a.tokens_per_s, a.lora_throughput_penalty)
    return Comparison(
        assumptions=a, base_weights=base, weights_budget_per_gpu=budget,
        full_replicas=full, multi_lora=multi,
        gpu_ratio=_derived(_number(full.gpus) / _number(multi.gpus), "ratio",
                           "full-replica GPUs / multi-LoRA GPUs", full.gpus, multi.gpus),
        cost_ratio=_derived(
            _number(full.cost_per_1m_tokens) / _number(multi.cost_per_1m_tokens), "ratio",
            "full-replica cost / multi-LoRA cost per 1M tokens",
            full.cost_per_1m_tokens, multi.cost_per_1m_tokens))


def _deployment(fleet: Fleet, replica_bytes: Figure, budget: Figure, a: Assumptions,
                replicas_rule: str, *replica_inputs: Figure) -> Deployment:
    replicas = _derived(fleet.replicas, "replicas", replicas_rule, *replica_inputs)
    per_replica = _derived(fleet.gpus_per_replica, "GPUs",
                           "ceil(memory per replica / weight budget per GPU)",
                           replica_bytes, budget)
    gpus = _derived(fleet.gpus, "GPUs", "replicas x GPUs per replica", replicas, per_replica)
    cost = cost_per_1m_tokens(fleet.gpus, gpu_hour_usd=_number(a.gpu_hour_usd),
                              demand=_number(a.demand_tokens_per_s))
    return Deployment(
        replicas=replicas, gpus_per_replica=per_replica, gpus=gpus,
        memory_per_replica=replica_bytes,
        gpu_memory=_derived(fleet.gpus * _number(a.gpu_memory_gib), "GiB",
                            "GPUs x gpu_memory_gib", gpus, a.gpu_memory_gib),
        cost_per_1m_tokens=_derived(cost, "USD", "GPUs x gpu_hour_usd / (demand x 3600) x 1e6",
                                    gpus, a.gpu_hour_usd, a.demand_tokens_per_s))
