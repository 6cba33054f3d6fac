"""loraplane's vLLM LoRA resolver: a request for an adapter the engine has not loaded asks the
loraplane agent on the same pod, which answers only for an approved version it has verified.

`register` is the `vllm.general_plugins` entry point. vLLM calls it in each of its processes; it
registers the resolver only where LORAPLANE_RESOLVER_SOCKET names the agent's socket, so an
engine with the package installed but not configured behaves as before."""

from __future__ import annotations

import logging
import os

from loraplane_vllm_resolver.asking import DEFAULT_DEADLINE_S, LOGGER

SOCKET_ENV = "LORAPLANE_RESOLVER_SOCKET"
DEADLINE_ENV = "LORAPLANE_RESOLVER_DEADLINE_S"
RESOLVER_NAME = "loraplane"
log = logging.getLogger(LOGGER)


def register() -> None:
    socket_path = os.environ.get(SOCKET_ENV, "").strip()
    if not socket_path:
        log.info("%s is not set: the loraplane resolver is not registered", SOCKET_ENV)
        return
    deadline_s = _deadline(os.environ.get(DEADLINE_ENV, ""))
    # Imported here: the asking half is plain Python, testable without vLLM.
    from vllm.lora.resolver import LoRAResolverRegistry

    from loraplane_vllm_resolver.resolver import LoraplaneResolver

    LoRAResolverRegistry.register_resolver(RESOLVER_NAME, LoraplaneResolver(socket_path, deadline_s))
    log.info("loraplane resolver registered: asking the agent at %s (deadline %.1f s)",
             socket_path, deadline_s)


def _deadline(raw: str) -> float:
    """A positive number of seconds; anything else is logged and the default used (a typo must
    not keep vLLM from starting, nor make a request wait forever)."""
    if not raw.strip():
        return DEFAULT_DEADLINE_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 600:
        log.warning("%s=%r is not a number of seconds in (0, 600]; using %.0f", DEADLINE_ENV, raw[:40],
                    DEFAULT_DEADLINE_S)
        return DEFAULT_DEADLINE_S
    return value
