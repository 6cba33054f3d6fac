"""What serving an adapter costs against serving the base, measured like for like.

The adapter and the base each run the same bursts: the suite's first prompts (the metric's
`prompts`), all sent at once (up to the worker's in-flight limit), each generating exactly
max_tokens (ignore_eos), so both sides see the same batch shape, concurrency and output length on
the same engine. The adapters of a batch that share a suite share the base's bursts, and each
round runs in mirror order: the base, every adapter, every adapter again in reverse, the base
(ABBA for one adapter; A B1 B2 B2 B1 A for two). Every side's two bursts of a round sit
symmetrically about the round's middle, so a drift in the machine's speed during the measurement
weighs on all sides alike, and the base runs two bursts a round whatever the batch's size.
Throughput is output tokens over the bursts' wall time, and the ratio the median of the rounds'
ratios; TTFT is the median of every request's time to first token, queueing included.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from statistics import median

from workers.evaluation.engine import AdapterRejected, EngineClient
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
    order: str  # e.g. "ABBA": A the base, B this adapter, o another adapter of the batch

    @property
    def round_ratios(self) -> list[float]:
        """Each round's adapter tokens/s over its base tokens/s."""
        ratios = []
        for r in range(len(self.base.bursts) // 2):  # each round adds two bursts to either side
            base = _rate(self.base.bursts[2 * r:2 * r + 2])
            ratios.append(_rate(self.adapter.bursts[2 * r:2 * r + 2]) / base if base else 0.0)
        return ratios

    @property
    def throughput_ratio(self) -> float:
        """The median over rounds: a drift within a round weighs on both sides alike, and a round
        that the machine's other work disturbed (a burst of it slows the LoRA path most) is
        outvoted."""
        return median(self.round_ratios) if self.round_ratios else 0.0


async def measure(client: EngineClient, served_base: str, adapters: dict[int, str], work: SuiteWork, *,
                  max_in_flight: int, rounds: int, prompts: int) -> tuple[dict[int, ServingCost], dict[int, str]]:
    """The serving cost of each of `adapters` (key: served name) on one suite's bursts, with the
    base's bursts shared; and the adapters the engine refused meanwhile, with why."""
    burst, bounded = work.tokenized[:prompts], Bounded(max_in_flight)
    base, sides, refused = Side(), {key: Side() for key in adapters}, dict[int, str]()
    sequence: list[int | None] = []  # None: the base
    for _ in range(rounds):
        sequence += [None, *adapters, *reversed(adapters), None]
    for key in sequence:
        if key in refused:
            continue
        side = base if key is None else sides[key]
        try:
            side.bursts.append(await _burst(client, served_base if key is None else adapters[key], burst,
                                            work.max_tokens, bounded))
        except AdapterRejected as rejected:
            if key is None:  # the base itself: nothing to compare with
                raise
            refused[key] = str(rejected)
    costs = {key: ServingCost(adapter=sides[key], base=base, prompts=len(burst),
                              concurrency=min(len(burst), max_in_flight), max_tokens=work.max_tokens,
                              order="".join("A" if k is None else "B" if k == key else "o" for k in sequence))
             for key in adapters if key not in refused}
    return costs, refused


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
