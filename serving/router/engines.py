"""What a node's vLLM itself says it holds, asked before the router sends that node a tenant's
prompt: a node's report (or a row in the registry's database) claiming a name is never enough.

vLLM lists each adapter it has loaded in GET /v1/models with `parent` set and `root` the folder
it was loaded from. The agent loads only from its verified cache, whose folders are named by the
version's digest, so a name listed from `<cache>/<digest>` is exactly that version. The node's
address itself is the one an admin bound (registry/nodes/addresses.py) or its pod's in the pool's
EndpointSlices (endpoint_slices.py), never the node's word."""

from __future__ import annotations

import json
import logging
import ssl
from pathlib import Path, PurePosixPath

import aiohttp

log = logging.getLogger("loraplane.router")
MAX_MODELS_BYTES = 4 * 1024 * 1024  # about 20,000 adapters listed


def node_tls(ca_file: Path | None) -> ssl.SSLContext | bool:
    """Certificates of https:// node addresses are checked against `ca_file` (the fleet's own
    CA), else against the system's; plain http:// addresses need no context."""
    return ssl.create_default_context(cafile=str(ca_file)) if ca_file else True


class EngineCheck:
    def __init__(self, http: aiohttp.ClientSession, timeout_s: float) -> None:
        self.http, self.timeout = http, aiohttp.ClientTimeout(total=timeout_s)

    async def holdings(self, url: str) -> dict[str, str] | None:
        """served name -> the digest its folder is named by, for every adapter the engine at
        `url` lists; None when it could not be asked or its answer could not be read."""
        try:
            async with self.http.get(url + "/v1/models", timeout=self.timeout) as response:
                if response.status != 200:
                    log.warning("the engine at node address %s answered /v1/models with %d", url,
                                response.status)
                    return None
                body = bytearray()
                async for chunk in response.content.iter_any():  # the whole answer, however it arrives
                    body += chunk
                    if len(body) > MAX_MODELS_BYTES:
                        log.warning("the engine at %s listed more than %d bytes of models", url,
                                    MAX_MODELS_BYTES)
                        return None
        except (aiohttp.ClientError, TimeoutError) as error:
            log.warning("cannot ask the engine at %s what it holds: %s", url, type(error).__name__)
            return None
        return _adapters(bytes(body))


def _adapters(body: bytes) -> dict[str, str] | None:
    try:
        models = json.loads(body)["data"]
        return {m["id"]: PurePosixPath(m["root"]).name for m in models
                if isinstance(m, dict) and m.get("parent") and isinstance(m.get("id"), str)
                and isinstance(m.get("root"), str)}
    except (ValueError, KeyError, TypeError):
        return None
