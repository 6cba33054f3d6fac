"""What serving an adapter costs against serving the base, measured like for like.

The adapter and the base each run the same bursts: the suite's first prompts (the metric's
`prompts`), all sent at once (up to the worker's in-flight limit), each generating exactly
max_tokens (ignore_eos), so both sides see the same batch shape, concurrency and output length on
the same engine. Bursts alternate
base, adapter, adapter, base (ABBA, repeated `rounds` times), so a drift in the machine's speed
during the measurement weighs on both sides alike. Throughput is output tokens over the bursts'
wall time, and the ratio the median of the rounds' ratios; TTFT is the median of every request's
time to first token, queueing included.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from statistics import median

from workers.evaluation.engine import EngineClient
from workers.evaluation.runner import Bounded, SuiteWork, Tokenized


@dataclass(frozen=True)
class Burst:
    tokens: int
    wall_s: float
    ttfts_s: list[float]


@dataclass
class Side:
    bursts: list[Burst] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        return _rate(self.bursts)

    @property
    def median_ttft_ms(self) -> float | None:
        measured = [t * 1000 for b in self.bursts for t in b.ttfts_s]
        return median(measured) if measured else None


@dataclass
class ServingCost:
    adapter: Side
    base: Side
    prompts: int
    concurrency: int
    max_tokens: int
    order: str  # e.g. "ABBA": A the base, B the adapter

    @property
    def round_ratios(self) -> list[float]:
        """Each ABBA round's adapter tokens/s over its base tokens/s."""
        ratios = []
        for r in range(len(self.order) // 4):  # each round adds two bursts to either side
            base = _rate(self.base.bursts[2 * r:2 * r + 2])
            ratios.append(_rate(self.adapter.bursts[2 * r:2 * r + 2]) / base if base else 0.0)
        return ratios

    @property
    def throughput_ratio(self) -> float:
        """The median over rounds: a drift within a round weighs on both sides alike, and a round
        that the machine's other work disturbed (a burst of it slows the LoRA path most) is
        outvoted."""
        return median(self.round_ratios) if self.round_ratios else 0.0


async def measure(client: EngineClient, served_base: str, adapter: str, work: SuiteWork, *,
                  max_in_flight: int, rounds: int, prompts: int) -> ServingCost:
    order, burst = "ABBA" * rounds, work.tokenized[:prompts]
    sides = {"A": Side(), "B": Side()}
    for turn in order:
        model = served_base if turn == "A" else adapter
        sides[turn].bursts.append(await _burst(client, model, burst, work.max_tokens, Bounded(max_in_flight)))
    return ServingCost(adapter=sides["B"], base=sides["A"], prompts=len(burst),
                       concurrency=min(len(burst), max_in_flight), max_tokens=work.max_tokens, order=order)


async def _burst(client: EngineClient, model: str, burst: list[Tokenized], max_tokens: int,
                 bounded: Bounded) -> Burst:
    started = time.perf_counter()
    generations = await asyncio.gather(*(
        bounded(client.generate(model, t.prompt_ids, max_tokens=max_tokens, stop=[], ignore_eos=True))
        for t in burst))
    wall_s = time.perf_counter() - started
    return Burst(tokens=sum(len(g.token_ids) for g in generations), wall_s=wall_s,
                 ttfts_s=[g.ttft_s for g in generations if g.ttft_s is not None])


def _rate(bursts: list[Burst]) -> float:
    wall = sum(b.wall_s for b in bursts)
    return sum(b.tokens for b in bursts) / wall if wall > 0 else 0.0
