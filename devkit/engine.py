"""Start a vLLM OpenAI server configured like a pool: the eval engine, or a serving node's.

vLLM lives in its own virtual environment (its pins must not constrain loraplane's) and is only
ever spoken to over HTTP. The command below is the one checked on CPU machines: the `vllm`
console script of the CPU wheel fails, so the module is started directly.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from workers.evaluation.parity import usable_cores

DEFAULT_VLLM_PYTHON = Path(__file__).resolve().parent.parent / ".venv-vllm" / "bin" / "python"


@dataclass(frozen=True)
class EngineSpec:
    model_dir: Path
    served_name: str
    port: int
    max_loras: int = 4
    max_cpu_loras: int = 8
    max_lora_rank: int = 16
    dtype: str = "float32"
    max_model_len: int = 512
    enable_lora: bool = True
    kv_cache_gib: int = 1
    host: str = "127.0.0.1"
    lora_modules: tuple[tuple[str, str], ...] = ()  # (name, path) of adapters loaded at start
    chat_template: str | None = None  # a Jinja file, for a base whose tokenizer has none


def vllm_python() -> Path:
    return Path(os.environ.get("LORAPLANE_VLLM_PYTHON", DEFAULT_VLLM_PYTHON))


def command(spec: EngineSpec) -> list[str]:
    args = [str(vllm_python()), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(spec.model_dir), "--served-model-name", spec.served_name,
            "--host", spec.host, "--port", str(spec.port), "--dtype", spec.dtype,
            "--max-model-len", str(spec.max_model_len), "--disable-uvicorn-access-log",
            # TTFT and queue time in every response, so clients need not stream to time them.
            "--enable-per-request-metrics"]
    if spec.chat_template:
        args += ["--chat-template", spec.chat_template]
    if spec.enable_lora:
        args += ["--enable-lora", "--max-loras", str(spec.max_loras),
                 "--max-cpu-loras", str(spec.max_cpu_loras), "--max-lora-rank", str(spec.max_lora_rank)]
        if spec.lora_modules:
            args += ["--lora-modules", *(f"{name}={path}" for name, path in spec.lora_modules)]
    return args


def engine_threads() -> int:
    """The model's threads: every core this process may use but one (vLLM's own split)."""
    return max(1, usable_cores() - 1)


def shared_modelinfo_dir() -> Path:
    """Where vLLM itself keeps what it learned of each model class: VLLM_CACHE_ROOT, else
    $XDG_CACHE_HOME/vllm, else ~/.cache/vllm."""
    root = (os.environ.get("VLLM_CACHE_ROOT")
            or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vllm")
    return Path(root) / "modelinfos"


def share_modelinfo_cache(cache_dir: Path) -> None:
    """Link a private cache folder's `modelinfos` to vLLM's shared one.

    Before it loads a model, vLLM inspects the model's class in a subprocess that imports torch
    (about 10 s here), unless `modelinfos` holds the answer: one JSON file per class, keyed by the
    hash of the class's source and written atomically. Shared, only the first start of each
    architecture on a machine pays for it; the rest of the cache stays private to the engine."""
    link, shared = cache_dir / "modelinfos", shared_modelinfo_dir()
    cache_dir.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        return
    try:
        shared.mkdir(parents=True, exist_ok=True)
        link.symlink_to(shared, target_is_directory=True)
    except OSError:  # no shared cache to be had (a read-only home): the engine keeps its own
        pass


def environment(spec: EngineSpec, cache_dir: Path | None = None, sockets_dir: Path | None = None) -> dict[str, str]:
    """vLLM's settings: runtime LoRA updates on, no hub, caches and sockets in a private folder
    (but for the model-class cache, which every engine shares: `share_modelinfo_cache`).

    Its ZMQ sockets (and vllm_dist_* files) go to `sockets_dir`, else into the cache folder. A
    socket's path must stay under 108 bytes, so a deep cache folder needs a short sockets_dir."""
    cache_dir = cache_dir or Path(tempfile.mkdtemp(prefix="vllm-cache-"))
    share_modelinfo_cache(cache_dir)
    return {
        **os.environ,
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
        "VLLM_CPU_KVCACHE_SPACE": str(spec.kv_cache_gib),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_CACHE_ROOT": str(cache_dir),
        "VLLM_NO_USAGE_STATS": "1",
        # The model runs inside the engine-core process instead of a third process of its own:
        # one import of torch and vLLM fewer, so a start takes about 30 s here instead of 37.
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        # In that process vLLM's CPU worker cannot set torch's threads itself. In a process of its
        # own it would use every core but one: the one it reserves for the API server and the
        # scheduler (vllm/utils/ompmultiprocessing.py), since threads on every core spin-wait on
        # each other whenever anything else runs. The same split, set from outside; an
        # OMP_NUM_THREADS already set wins.
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS") or str(engine_threads()),
        "TMPDIR": str(sockets_dir or cache_dir),
    }
