"""The registry, as serving processes see it: the active-set long-poll, the node status report,
the pool's rollout and the trust bundle of the keys that sign attestations."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

import httpx

from signed_digests.provenance import MAX_ENVELOPE_BYTES, TRUST_BUNDLE_PATH


class RegistryUnavailable(Exception):
    pass


class RegistryRefused(Exception):
    """The registry answered that it will never take this request as it is (400, 413, 422): a
    token, a route or a registry that is away answers otherwise, and is waited out."""


FINAL_REFUSALS = (400, 413, 422)


@dataclass(frozen=True)
class ActiveSet:
    generation: int
    entries: list[dict[str, Any]]
    etag: str
    limits: dict[str, int] | None = None
    signed: dict[str, Any] | None = None  # the pool's signed set (serving/agent/signed_sets.py)
    overflow: str = "refuse"  # on_demand: a node may be sent a version it does not hold yet

    @property
    def signed_generation(self) -> int | None:
        """The generation the pool's signed set names, read without checking its signature (the
        agent checks it; the registry never serves one that does not verify)."""
        if self.signed is None:
            return None
        try:
            document = json.loads(base64.b64decode(self.signed["payload"], validate=True))
        except (TypeError, KeyError, ValueError):
            return None
        generation = document.get("generation") if isinstance(document, dict) else None
        return generation if isinstance(generation, int) else None


class NewestSigned:
    """The newest signed generation taken: a set whose signed generation is older is an old set
    put back into the registry's database (a registry restarted since serves it), never taken."""

    def __init__(self) -> None:
        self.generation = -1

    def admits(self, active: ActiveSet) -> bool:
        signed = active.signed_generation
        if signed is not None and signed < self.generation:
            return False
        self.generation = max(self.generation, signed if signed is not None else -1)
        return True


class RegistryClient:
    def __init__(self, url: str, token: str | httpx.Auth, pool: str, timeout_s: float,
                 node_id: str | None = None) -> None:
        """With `node_id`, the active set holds only what the pool's placement gives that node.
        `token`: the bearer token, or what sets it on each request (a token file that is renewed)."""
        self.pool, self.node_id, self._timeout_s = pool, node_id, timeout_s
        if isinstance(token, str):
            self._http = httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"},
                                           timeout=timeout_s)
        else:
            self._http = httpx.AsyncClient(base_url=url, auth=token, timeout=timeout_s)

    async def next_active_set(self, etag: str | None, wait_s: float) -> ActiveSet | None:
        """The set once it differs from `etag` (None: still the same after wait_s)."""
        headers = {"If-None-Match": etag} if etag else {}
        params: dict[str, str | float] = {"wait": wait_s, **({"node": self.node_id} if self.node_id else {})}
        try:
            response = await self._http.get(f"/v1/pools/{self.pool}/active-set",
                                             params=params, headers=headers,
                                             timeout=wait_s + self._timeout_s)
        except httpx.HTTPError as error:
            raise RegistryUnavailable(f"{type(error).__name__}: {error}") from error
        if response.status_code == 304:
            return None
        if response.status_code != 200:
            raise RegistryUnavailable(f"HTTP {response.status_code}: {response.text[:300]}")
        try:
            body = response.json()
            return ActiveSet(body["generation"], body["entries"], response.headers["ETag"], body.get("limits"),
                             body.get("signed"), str(body.get("overflow", "refuse")))
        except (ValueError, KeyError, TypeError) as error:
            raise RegistryUnavailable(f"an unreadable active set: {error!r}") from error

    async def report(self, node_id: str, status: dict[str, Any]) -> None:
        try:
            response = await self._http.put(f"/v1/pools/{self.pool}/nodes/{node_id}/status", json=status)
        except httpx.HTTPError as error:
            raise RegistryUnavailable(f"{type(error).__name__}: {error}") from error
        if response.status_code != 200:
            raise RegistryUnavailable(f"HTTP {response.status_code}: {response.text[:300]}")

    async def report_traffic(self, router_id: str, requests_per_s: dict[str, float],
                             windows: tuple[str, list[dict[str, Any]]] | None = None) -> None:
        """The request rates, and what each served name saw since the last report (id, deltas)."""
        body: dict[str, Any] = {"requests_per_s": requests_per_s}
        if windows is not None:
            body["report_id"], body["windows"] = windows
        try:
            response = await self._http.put(f"/v1/pools/{self.pool}/routers/{router_id}/traffic",
                                            json=body)
        except httpx.HTTPError as error:
            raise RegistryUnavailable(f"{type(error).__name__}: {error}") from error
        if response.status_code == 204:
            return
        problem = f"HTTP {response.status_code}: {response.text[:300]}"
        if response.status_code in FINAL_REFUSALS:
            raise RegistryRefused(problem)
        raise RegistryUnavailable(problem)

    async def whoami(self) -> dict[str, Any]:
        """Who this process's token is: its role, pool and the node or router id it is bound to."""
        try:
            response = await self._http.get("/v1/whoami")
            response.raise_for_status()
            return response.json()
        except httpx.HTTPStatusError as error:
            raise RegistryUnavailable(f"HTTP {error.response.status_code}: {error.response.text[:300]}") from error
        except (httpx.HTTPError, ValueError) as error:
            raise RegistryUnavailable(f"{type(error).__name__}: {error}") from error

    async def rollout(self) -> list[dict[str, Any]]:
        """Every node's last report, as the registry judges it (converged, stale, serving)."""
        try:
            response = await self._http.get(f"/v1/pools/{self.pool}/rollout")
            response.raise_for_status()
            return response.json()["nodes"]
        except httpx.HTTPStatusError as error:
            raise RegistryUnavailable(f"HTTP {error.response.status_code}: {error.response.text[:300]}") from error
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as error:
            raise RegistryUnavailable(f"{type(error).__name__}: {error}") from error

    async def trust_bundle(self) -> dict[str, Any]:
        """The registry's trust bundle envelope, as published (not yet verified: the caller
        decides whether to believe it). Read at most MAX_ENVELOPE_BYTES before parsing."""
        try:
            async with self._http.stream("GET", TRUST_BUNDLE_PATH) as response:
                if response.status_code != 200:
                    raise RegistryUnavailable(f"the trust bundle: HTTP {response.status_code}")
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_ENVELOPE_BYTES:
                        raise RegistryUnavailable("the trust bundle is larger than 512 KiB")
            document = json.loads(body)
        except httpx.HTTPError as error:
            raise RegistryUnavailable(f"{type(error).__name__}: {error}") from error
        except ValueError as error:
            raise RegistryUnavailable(f"the trust bundle is not JSON: {error}") from error
        if not isinstance(document, dict):
            raise RegistryUnavailable("the trust bundle is not a JSON object")
        return document

    async def close(self) -> None:
        await self._http.aclose()
