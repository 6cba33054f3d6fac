"""Worker settings: the registry's (database, store, broker) plus the eval engine it drives."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from registry.settings import RegistrySettings


class WorkerSettings(RegistrySettings):
    engine_url: str = Field(default="http://127.0.0.1:8100", description="The eval vLLM server.")
    engine_base_model: str = Field(default="", description=(
        "The registry's name for the base model the engine serves; the worker consumes that "
        "base's evaluation queue."))
    engine_model_dir: Path | None = Field(default=None, description=(
        "The base model's local folder, for the merged-weights parity reference. Empty means "
        "the folder the engine reports (same host)."))
    engine_max_loras: int = Field(default=4, ge=1, le=256, description=(
        "The engine's --max-loras: how many versions one batch evaluates together."))
    engine_max_lora_rank: int = Field(default=16, ge=1, le=512)
    engine_dtype: Literal["float16", "bfloat16", "float32"] = "float32"
    engine_request_timeout_s: float = Field(default=120, gt=0, le=3600, description=(
        "Longest wait for one engine request (a generation batch, a scoring request). Raise it "
        "for long evaluations of a large base on a slow engine."))
    parity_device: Literal["auto", "cpu", "cuda"] = Field(default="auto", description=(
        "Where the merged-weights parity reference runs: auto is the worker's GPU when it has one."))
    parity_keep_base: bool = Field(default=True, description=(
        "Keep the parity reference's base in memory between batches (it is loaded once per worker "
        "process, as the engine's is). Off: loaded for each batch, and freed after it."))
    parity_threads: int | None = Field(default=None, ge=1, le=1024, description=(
        "CPU threads of the parity reference on the CPU. Empty means every core this process may "
        "use (it runs at a lower priority than the engine it shares them with)."))
    engine_max_in_flight: int = Field(default=256, ge=1, le=4096, description=(
        "Prompts in flight at the engine (an evaluation's generations go 16 to a request); "
        "continuous batching does the rest. The default is vLLM's own max_num_seqs: fewer leaves "
        "its batches part empty, more only queues in vLLM."))

    artifact_cache_dir: Path | None = Field(default=None, description=(
        "Where adapters are unpacked for the engine to read. Empty means data_dir/eval-cache."))
    lease_s: float = Field(default=120, ge=2, le=24 * 3600, description=(
        "How long a claim lasts without renewal; a killed worker's evaluations wait this long."))
    max_attempts: int = Field(default=5, ge=1, le=100, description=(
        "Claims of an evaluation while the engine is unavailable, before it fails."))
    retry_backoff_s: float = Field(default=5, gt=0, le=3600)
    retry_backoff_max_s: float = Field(default=120, gt=0, le=24 * 3600)

    @model_validator(mode="after")
    def _check_engine(self) -> WorkerSettings:
        if not self.engine_base_model:
            raise ValueError("LORAPLANE_ENGINE_BASE_MODEL must name the base model the engine serves")
        if self.artifact_cache_dir is None:
            self.artifact_cache_dir = self.data_dir / "eval-cache"
        return self

    @property
    def artifact_cache(self) -> Path:
        """artifact_cache_dir, which validation fills in when it is left empty."""
        if self.artifact_cache_dir is None:
            raise ValueError("artifact_cache_dir is unset: these settings were not validated")
        return self.artifact_cache_dir

    def backoff_s(self, attempt: int) -> float:
        return min(self.retry_backoff_max_s, self.retry_backoff_s * 2 ** max(0, attempt - 1))


@lru_cache
def get_worker_settings() -> WorkerSettings:
    return WorkerSettings()
