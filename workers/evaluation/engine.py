"""The eval engine, a vLLM OpenAI server, spoken to over HTTP only.

Every engine failure becomes one of two errors: EngineUnavailable (the engine is down or
overloaded; retry later) or AdapterRejected (this adapter cannot be served; a clear failed result).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import httpx


class EngineUnavailable(Exception):
    """The engine cannot be reached or failed as a whole; the evaluation should be retried."""


class AdapterRejected(Exception):
    """The engine refused this adapter; the message says why in the user's terms."""


@dataclass
class Generation:
    text: str
    token_ids: list[int]
    logprobs: list[float]
    ttft_s: float | None  # None when the engine runs without --enable-per-request-metrics
    finish_reason: str | None


@dataclass
class EngineInfo:
    url: str
    vllm_version: str
    served_base: str
    model_dir: str
    observed_max_loras: int | None


_RANK_ERROR = re.compile(r"LoRA rank (\d+) is greater than max_lora_rank (\d+)")


class EngineClient:
    def __init__(self, url: str, *, timeout_s: float, max_in_flight: int) -> None:
        self.url = url.rstrip("/")
        limits = httpx.Limits(max_connections=max_in_flight, max_keepalive_connections=max_in_flight)
        self._http = httpx.AsyncClient(base_url=self.url, timeout=timeout_s, limits=limits)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(self, method: str, path: str, **kwargs) -> httpx.Response:
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.TransportError as error:
            raise EngineUnavailable(f"engine at {self.url} unreachable: {type(error).__name__}") from error
        if response.status_code in (502, 503, 504):
            raise EngineUnavailable(f"engine at {self.url} answered {response.status_code}")
        return response

    async def describe(self) -> EngineInfo:
        health = await self._call("GET", "/health")
        if health.status_code != 200:
            raise EngineUnavailable(f"engine at {self.url} is not healthy ({health.status_code})")
        version = (await self._call("GET", "/version")).json().get("version", "unknown")
        models = (await self._call("GET", "/v1/models")).json()["data"]
        base = next(m for m in models if m.get("parent") is None)
        metrics = (await self._call("GET", "/metrics")).text
        found = re.search(r'vllm:lora_requests_info\{max_lora="(\d+)"', metrics)
        return EngineInfo(url=self.url, vllm_version=version, served_base=base["id"],
                          model_dir=base.get("root") or "",
                          observed_max_loras=int(found.group(1)) if found else None)

    async def load_adapter(self, served_name: str, path: str) -> None:
        response = await self._call("POST", "/v1/load_lora_adapter",
                                    json={"lora_name": served_name, "lora_path": path})
        if response.status_code == 200:
            return
        message = _error_message(response)
        if response.status_code == 400 and "already been loaded" in message:
            return  # served names are immutable: the loaded one has these bytes
        rank = _RANK_ERROR.search(message)
        if rank:
            raise AdapterRejected(f"rank {rank.group(1)} exceeds the engine's max_lora_rank "
                                  f"{rank.group(2)}; evaluate it on an engine (and a pool) with a "
                                  f"max_lora_rank of at least {rank.group(1)}")
        if response.status_code == 404:
            raise AdapterRejected(f"the engine cannot read the adapter at {path}: {message}; its "
                                  f"artifact cache must be on the engine's host")
        if response.status_code >= 500 and "Worker failed" not in message and "add_lora" not in message:
            raise EngineUnavailable(f"engine failed while loading {served_name}: {message}")
        raise AdapterRejected(f"the engine refused the adapter ({response.status_code}): {message}")

    async def unload_adapter(self, served_name: str) -> None:
        response = await self._call("POST", "/v1/unload_lora_adapter", json={"lora_name": served_name})
        if response.status_code not in (200, 404):  # 404: already gone, which is the goal
            raise EngineUnavailable(f"engine failed to unload {served_name}: {_error_message(response)}")

    async def tokenize(self, text: str) -> list[int]:
        response = await self._call("POST", "/tokenize", json={"prompt": text})
        _check(response, "tokenize")
        return response.json()["tokens"]

    async def prompt_logprobs(self, model: str, token_ids: list[int]) -> list[float | None]:
        """Log-probability of every prompt token given those before it (echo, no generation)."""
        response = await self._call("POST", "/v1/completions", json={
            "model": model, "prompt": token_ids, "max_tokens": 0, "echo": True, "logprobs": 0,
            "temperature": 0})
        _check(response, f"scoring with {model}")
        return response.json()["choices"][0]["logprobs"]["token_logprobs"]

    async def generate(self, model: str, token_ids: list[int], *, max_tokens: int,
                       stop: list[str], ignore_eos: bool) -> Generation:
        """Greedy generation with the chosen tokens' ids and log-probabilities. The time to the
        first token comes from vLLM's own per-request metrics (--enable-per-request-metrics):
        streaming only to time it would cost the engine a chunk per token."""
        body = await self._complete(model, token_ids, max_tokens=max_tokens, stop=stop, ignore_eos=ignore_eos)
        metrics = body.get("metrics") or {}
        ttft_ms = metrics.get("time_to_first_token_ms")
        ttft_s = None if ttft_ms is None else (ttft_ms + (metrics.get("queue_time_ms") or 0)) / 1000
        return _generation(body["choices"][0], ttft_s)

    async def generate_many(self, model: str, prompts: list[list[int]], *, max_tokens: int,
                            stop: list[str], ignore_eos: bool) -> list[Generation]:
        """The greedy generations of several prompts, in one request: the engine batches them
        exactly as it batches separate requests, without an HTTP exchange per prompt (on a small
        model those cost more than the generations). vLLM times a request, not a prompt, so
        these carry no TTFT."""
        body = await self._complete(model, prompts, max_tokens=max_tokens, stop=stop, ignore_eos=ignore_eos)
        choices = sorted(body["choices"], key=lambda choice: choice["index"])
        if len(choices) != len(prompts):
            raise EngineUnavailable(f"engine answered {len(choices)} of {len(prompts)} prompts")
        return [_generation(choice, None) for choice in choices]

    async def _complete(self, model: str, prompt: list, *, max_tokens: int, stop: list[str],
                        ignore_eos: bool) -> dict:
        response = await self._call("POST", "/v1/completions", json={
            "model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "logprobs": 0, "return_tokens_as_token_ids": True, "stop": stop or None,
            "ignore_eos": ignore_eos})
        _check(response, f"generation with {model}")
        return response.json()


def _generation(choice: dict, ttft_s: float | None) -> Generation:
    logprobs = choice.get("logprobs") or {}
    return Generation(choice["text"], [int(t.removeprefix("token_id:")) for t in logprobs.get("tokens", [])],
                      logprobs.get("token_logprobs", []), ttft_s, choice.get("finish_reason"))


def _error_message(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])[:500]
    except (ValueError, KeyError, TypeError):
        return response.text[:500]


def _check(response: httpx.Response, what: str) -> None:
    if response.status_code == 404:
        raise AdapterRejected(f"{what}: the engine does not serve it ({_error_message(response)})")
    if response.status_code != 200:
        raise EngineUnavailable(f"{what} failed ({response.status_code}): {_error_message(response)}")
