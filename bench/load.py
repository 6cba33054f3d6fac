"""An OpenAI-API load generator: n requests at a fixed concurrency, streamed or not, timing
each one's first byte of generated text and its end."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp


@dataclass(frozen=True)
class Sample:
    status: int
    ttft_s: float
    latency_s: float
    served: str
    error: str = ""  # the start of the body of a failed request


@dataclass(frozen=True)
class Phase:
    samples: list[Sample]
    wall_s: float

    @property
    def throughput(self) -> float:
        return len(self.samples) / self.wall_s

    def median_ms(self, field: str) -> float:
        return statistics.median(getattr(s, field) for s in self.samples) * 1000

    @property
    def failures(self) -> int:
        return sum(s.status != 200 for s in self.samples)

    def failure_summary(self) -> str:
        failed = [f"{s.status} {s.error}" for s in self.samples if s.status != 200]
        return f"{len(failed)} of {len(self.samples)} failed, e.g. {failed[:3]}"


async def run_phase(url: str, key: str, model_for: Callable[[int], str], *, n: int,
                    concurrency: int, stream: bool, prompt: str, max_tokens: int) -> Phase:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    counter = iter(range(n))
    samples: list[Sample] = []

    async def worker(http: aiohttp.ClientSession) -> None:
        for index in counter:
            body = json.dumps({"model": model_for(index), "prompt": prompt, "max_tokens": max_tokens,
                               "temperature": 0, "stream": stream, "ignore_eos": True}).encode()
            samples.append(await _one(http, url, body, headers, stream))

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=300)) as http:
        started = time.perf_counter()
        await asyncio.gather(*(worker(http) for _ in range(concurrency)))
        wall = time.perf_counter() - started
    return Phase(samples, wall)


async def run_interleaved(endpoints: dict[str, tuple[str, str, str]], *, rotations: int, prompt: str,
                          max_tokens: int, gap_s: float = 0) -> dict[tuple[str, bool], list[Sample]]:
    """One request at a time, taking each (endpoint, streamed or not) in turn, `rotations` times:
    on a noisy machine, neighbouring requests see the same conditions, whatever the drift.
    `endpoints` maps a name to (url, model, key); `gap_s` is a pause after each request."""
    ways = [(name, stream) for stream in (True, False) for name in endpoints]
    samples: dict[tuple[str, bool], list[Sample]] = {way: [] for way in ways}
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as http:
        for rotation in range(rotations):
            for name, stream in ways[rotation % len(ways):] + ways[:rotation % len(ways)]:
                url, model, key = endpoints[name]
                body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens,
                                   "temperature": 0, "stream": stream, "ignore_eos": True}).encode()
                headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
                samples[(name, stream)].append(await _one(http, url, body, headers, stream))
                await asyncio.sleep(gap_s)
    return samples


async def _one(http: aiohttp.ClientSession, url: str, body: bytes, headers: dict, stream: bool) -> Sample:
    started = time.perf_counter()
    first = None
    async with http.post(url + "/v1/completions", data=body, headers=headers) as response:
        if response.status != 200:
            error = (await response.read())[:300].decode(errors="replace")
        elif stream:
            async for line in response.content:
                if first is None and line.startswith(b"data: {"):
                    first = time.perf_counter()
        else:
            await response.read()
        end = time.perf_counter()
        served = response.headers.get("x-loraplane-served-name", "")
        return Sample(response.status, (first or end) - started, end - started, served,
                      error if response.status != 200 else "")
