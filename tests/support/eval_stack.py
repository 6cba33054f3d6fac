"""The evaluation stack: a real vLLM eval engine on CPU and a worker. Its fixtures are made
session-wide in tests/conftest.py, so every folder that evaluates shares one engine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devkit import services
from tests.support import head_start
from tests.support.names import BUCKET, KIT_BASE

ENGINE_MAX_LORA_RANK = 16
# Short enough that the fault tests see redelivery and lease expiry within seconds.
LEASE_S, VISIBILITY_TIMEOUT_S = 6, 8


class Worker:
    """An evaluation worker process that a test may kill and start again."""

    def __init__(self, folder: Path, env: dict[str, str], name: str, *, inherit_settings: bool = True) -> None:
        self.folder, self.env, self.name, self.inherit = folder, env, name, inherit_settings
        self.service = services.start_worker(folder, env, name, inherit_settings=inherit_settings)

    def kill(self) -> None:
        services.stop_group(self.service, sig=9)

    def restart(self) -> None:
        self.kill()
        self.service = services.start_worker(self.folder, self.env, self.name, inherit_settings=self.inherit)

    def stop(self) -> None:
        services.stop_group(self.service)


@head_start.starter("eval_engine")
def start_eval_engine(service_dir: Path, kit) -> services.Service:
    spec = services.kit_engine(kit, KIT_BASE, max_loras=4, max_lora_rank=ENGINE_MAX_LORA_RANK)
    return services.start_vllm(service_dir / "vllm", spec)


@pytest.fixture(scope="session")
def eval_engine(service_dir: Path, session_head_start, task_kit) -> Iterator[services.Service]:
    engine = session_head_start.take("eval_engine")  # started while the first modules ran
    yield engine
    services.stop_group(engine)
    services.remove_tree(service_dir / "vllm" / "cache")


def worker_env(database_url: str, s3: services.Service, redis: services.Service, *, engine_url: str,
               base: str, **extra: str) -> dict[str, str]:
    return {
        "LORAPLANE_DATABASE_URL": database_url,
        "LORAPLANE_STORAGE": "s3",
        "LORAPLANE_S3_ENDPOINT_URL": s3.url,
        "LORAPLANE_S3_BUCKET": BUCKET,
        "LORAPLANE_BROKER_URL": redis.url,
        "LORAPLANE_BROKER_VISIBILITY_TIMEOUT_S": str(VISIBILITY_TIMEOUT_S),
        "LORAPLANE_ENGINE_URL": engine_url,
        "LORAPLANE_ENGINE_BASE_MODEL": base,
        "LORAPLANE_ENGINE_MAX_LORAS": "4",
        "LORAPLANE_ENGINE_MAX_LORA_RANK": str(ENGINE_MAX_LORA_RANK),
        "LORAPLANE_LEASE_S": str(LEASE_S),
        **extra,
    }


@pytest.fixture(scope="session")
def eval_worker(service_dir, database_url, s3, redis, eval_engine, kit_base) -> Iterator[Worker]:
    env = worker_env(database_url, s3, redis, engine_url=eval_engine.url, base=kit_base,
                     LORAPLANE_METRICS_PORT=str(services.free_port()), LORAPLANE_METRICS_HOST="127.0.0.1")
    worker = Worker(service_dir / "worker", env, "eval")
    yield worker
    worker.stop()
