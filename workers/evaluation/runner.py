"""Send a batch's requests to the engine concurrently, so continuous batching does the work.
Generations go several prompts to a request: on a small model the HTTP exchange per prompt costs
more than the generation (the kit's 32-prompt suite on CPU: the adapter's generations took
0.6 s one prompt to a request, 0.33 s sixteen to a request).

Phases are separated where a measurement or the engine needs it: the base's generations, then all
the adapters' generations together (their throughput is compared with the base's), then the
scoring requests, one at a time.

Why one at a time: with LoRA enabled, vLLM 0.32 on CPU kills its engine core when one step holds
two prompt log-probability (echo) requests, whichever models they are for (`einsum(): subscript b
has size N ... previously seen size M` in the LoRA logits processor: the prompt-logits LoRA
mapping covers every such request in the step, the logits only one). A lone request is safe, so
the eval engine must serve its worker alone, and scoring requests are sent one by one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field

from workers.evaluation.engine import AdapterRejected, EngineClient, Generation

# Generations go to the engine this many prompts to a request, so the worker's in-flight limit
# counts prompts: max_in_flight // PROMPTS_PER_REQUEST requests at once.
PROMPTS_PER_REQUEST = 16


@dataclass(frozen=True)
class Tokenized:
    prompt_ids: list[int]
    full_ids: list[int]  # prompt + reference
    reference_start: int


@dataclass
class SuiteWork:
    suite_id: int
    prompts: list[str]
    references: list[str]
    max_tokens: int
    stop: list[str]
    ignore_eos: bool
    tokenized: list[Tokenized] = field(default_factory=list)


@dataclass
class SideRun:
    """One model (the base, or one adapter) over one suite."""

    generations: list[Generation] = field(default_factory=list)
    reference_logliks: list[float | None] = field(default_factory=list)
    generation_wall_s: float = 0.0
    rejected: str | None = None


@dataclass
class BatchRun:
    base: dict[int, SideRun]      # by suite id
    adapters: dict[int, SideRun]  # by evaluation id
    timings: dict[str, float]


class Bounded:
    """At most max_in_flight requests at once."""

    def __init__(self, max_in_flight: int) -> None:
        self._limit = asyncio.Semaphore(max_in_flight)

    async def __call__(self, call: Awaitable):
        async with self._limit:
            return await call


async def generate(client: EngineClient, served_base: str, suites: dict[int, SuiteWork],
                   adapters: dict[int, tuple[str, int]], max_in_flight: int) -> BatchRun:
    """Tokenize, then the base's and the adapters' generations. adapters maps evaluation id to
    (served name, suite id)."""
    bounded, timings = Bounded(max_in_flight), {}
    started = time.perf_counter()
    for work in suites.values():
        work.tokenized = await asyncio.gather(*(bounded(_tokenize(client, p, r))
                                                for p, r in zip(work.prompts, work.references, strict=True)))
    timings["tokenize_s"] = time.perf_counter() - started

    base = {suite_id: SideRun() for suite_id in suites}
    runs = {evaluation_id: SideRun() for evaluation_id in adapters}
    bounded = Bounded(max(1, max_in_flight // PROMPTS_PER_REQUEST))
    phase = time.perf_counter()
    await asyncio.gather(*(_generate(client, served_base, suites[s], base[s], bounded) for s in suites))
    timings["base_generation_s"] = time.perf_counter() - phase

    phase = time.perf_counter()
    await asyncio.gather(*(_generate(client, name, suites[s], runs[e], bounded)
                           for e, (name, s) in adapters.items()))
    timings["adapter_generation_s"] = time.perf_counter() - phase
    return BatchRun(base=base, adapters=runs, timings=timings)


async def score(client: EngineClient, served_base: str, suites: dict[int, SuiteWork],
                adapters: dict[int, tuple[str, int]], batch: BatchRun) -> None:
    """The reference log-likelihoods of the base and of every adapter (see the module's note)."""
    phase, alone = time.perf_counter(), _one_at_a_time()
    for s in suites:
        await _score(client, served_base, suites[s], batch.base[s], alone)
    for e, (name, s) in adapters.items():
        await _score(client, name, suites[s], batch.adapters[e], alone)
    batch.timings["scoring_s"] = time.perf_counter() - phase


def _one_at_a_time():
    lock = asyncio.Lock()

    async def bounded(call: Awaitable):
        async with lock:
            return await call

    return bounded


async def _tokenize(client: EngineClient, prompt: str, reference: str) -> Tokenized:
    prompt_ids, full_ids = await asyncio.gather(client.tokenize(prompt), client.tokenize(prompt + reference))
    start = 0
    while start < min(len(prompt_ids), len(full_ids)) and prompt_ids[start] == full_ids[start]:
        start += 1  # a tokenizer may merge across the boundary; score from where they part
    return Tokenized(prompt_ids, full_ids, max(start, 1))


async def _generate(client: EngineClient, model: str, work: SuiteWork, side: SideRun, bounded) -> None:
    started = time.perf_counter()
    chunks = [work.tokenized[i:i + PROMPTS_PER_REQUEST] for i in range(0, len(work.tokenized), PROMPTS_PER_REQUEST)]
    try:
        answered = await asyncio.gather(*(
            bounded(client.generate_many(model, [t.prompt_ids for t in chunk], max_tokens=work.max_tokens,
                                         stop=work.stop, ignore_eos=work.ignore_eos))
            for chunk in chunks))
        side.generations = [generation for chunk in answered for generation in chunk]
    except AdapterRejected as rejected:
        side.rejected = str(rejected)
    side.generation_wall_s = time.perf_counter() - started


async def _score(client: EngineClient, model: str, work: SuiteWork, side: SideRun, bounded) -> None:
    if side.rejected:
        return
    try:
        logprobs = await asyncio.gather(*(bounded(client.prompt_logprobs(model, t.full_ids))
                                          for t in work.tokenized))
    except AdapterRejected as rejected:
        side.rejected = str(rejected)
        return
    side.reference_logliks = [mean_of_present(lp[t.reference_start:])
                              for lp, t in zip(logprobs, work.tokenized, strict=True)]


def mean_of_present(values: list[float | None]) -> float | None:
    """The mean of the values that are not None (vLLM gives the first prompt token None)."""
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None
