"""The suite's serving nodes: one pair of real vLLMs on CPU, started once and shared by the agent,
router, placement and long-tail tests.

A vLLM start costs about half a minute here, so the pair outlives every module. Each module has
it to itself: its pool, adapters and node ids are its own, and when the module ends its agents
are stopped and whatever they loaded is unloaded, so the next module finds both engines running
with nothing but their static adapter.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from devkit import services
from tests.support import head_start
from tests.support.names import KIT_BASE
from tests.support.nodes import Restartable, served_adapters

# Loaded at node a's start, so agent tests can show the agent leaves what it did not load alone.
STATIC_ADAPTER = "static-reverse"
# The kit's tokenizer has no chat template; this one sends the user's words as the prompt.
CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"
RESOLVER_DEADLINE_S = 20


def resolver_socket(service_dir: Path) -> Path:
    """Where node b's resolver plugin asks an agent for the names vLLM does not hold. While no
    agent answers there, the plugin resolves nothing and vLLM answers 404, as without it."""
    return service_dir / "resolver.sock"


@head_start.starter("serving_pair")
def start_serving_pair(service_dir: Path, kit) -> dict[str, Restartable]:
    template = service_dir / "chat-template.jinja"
    template.write_text(CHAT_TEMPLATE)
    static = ((STATIC_ADAPTER, str(kit.adapters["reverse_words"])),)

    # Node b carries loraplane's resolver plugin, for the long tail's tests.
    resolver = {"VLLM_PLUGINS": "loraplane_resolver", "LORAPLANE_RESOLVER_SOCKET": str(resolver_socket(service_dir)),
                "LORAPLANE_RESOLVER_DEADLINE_S": str(RESOLVER_DEADLINE_S)}

    def start(name: str, lora_modules: tuple, env: dict[str, str]) -> Restartable:
        folder = service_dir / f"serving-vllm-{name}"
        spec = services.kit_engine(kit, KIT_BASE, chat_template=str(template), lora_modules=lora_modules)
        return Restartable(lambda: services.start_vllm(folder, spec, env=env))

    # Both at once: a start is mostly one process importing on one core, and there are two.
    with ThreadPoolExecutor(2) as starting:
        started = {"a": starting.submit(start, "a", static, {}), "b": starting.submit(start, "b", (), resolver)}
    pair = {name: future.result() for name, future in started.items() if future.exception() is None}
    if len(pair) < len(started):  # a start that failed fails the fixture, once the other is stopped
        for node in pair.values():
            node.stop()
        next(future for future in started.values() if future.exception()).result()
    return pair


@pytest.fixture(scope="session")
def serving_pair(service_dir: Path, session_head_start, task_kit) -> Iterator[dict[str, Restartable]]:
    pair = session_head_start.take("serving_pair")  # started while the first modules ran
    try:
        yield pair
    finally:
        for name, node in pair.items():
            node.stop()
            services.remove_tree(service_dir / f"serving-vllm-{name}" / "cache")


@pytest.fixture(scope="module")
def vllm_pair(serving_pair: dict[str, Restartable]) -> Iterator[dict[str, Restartable]]:
    """The pair for one module: both running when it starts, and cleared when it ends (after the
    module's agents, which depend on this fixture, have stopped)."""
    for node in serving_pair.values():
        if node.service.process.poll() is not None:  # a test stopped it and failed before restarting
            node.restart()
    yield serving_pair
    for node in serving_pair.values():
        if node.service.process.poll() is not None:
            node.restart()
            continue
        for name in served_adapters(node.url):
            if name != STATIC_ADAPTER:
                unloaded = httpx.post(node.url + "/v1/unload_lora_adapter", json={"lora_name": name}, timeout=30)
                assert unloaded.status_code == 200, unloaded.text
