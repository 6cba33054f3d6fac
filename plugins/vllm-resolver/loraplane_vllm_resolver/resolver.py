"""The resolver vLLM calls: the agent's answer as a LoRARequest, or None, never an exception."""

from __future__ import annotations

import hashlib
import logging

from vllm.lora.request import LoRARequest
from vllm.lora.resolver import LoRAResolver

from loraplane_vllm_resolver.asking import DEFAULT_DEADLINE_S, LOGGER, Asker

log = logging.getLogger(LOGGER)


class LoraplaneResolver(LoRAResolver):
    def __init__(self, socket_path: str, deadline_s: float = DEFAULT_DEADLINE_S) -> None:
        self.asker = Asker(socket_path, deadline_s)

    async def resolve_lora(self, base_model_name: str, lora_name: str) -> LoRARequest | None:
        resolved = await self.asker.ask(base_model_name, lora_name)  # never raises
        if resolved is None:
            return None
        try:
            return LoRARequest(lora_name=resolved.served_name, lora_int_id=stable_id(resolved.served_name),
                               lora_path=resolved.path)
        except Exception:  # noqa: BLE001 - never raise into vLLM
            log.exception("could not build vLLM's request for %r", lora_name[:200])
            return None


def stable_id(name: str) -> int:
    """One positive 31-bit id per served name (vLLM numbers resolved adapters itself as well)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big") % (2**31 - 1) + 1
