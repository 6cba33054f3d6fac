"""vLLM's runtime LoRA endpoints and its model list. The agent is their only caller."""

from __future__ import annotations

from dataclasses import dataclass

import httpx


class VllmUnavailable(Exception):
    pass


@dataclass(frozen=True)
class LoadRefused(Exception):
    status: int
    reason: str

    def __str__(self) -> str:
        return f"vLLM refused the load (HTTP {self.status}): {self.reason}"


class VllmClient:
    def __init__(self, url: str, timeout_s: float) -> None:
        self.url = url
        self._http = httpx.AsyncClient(base_url=url, timeout=timeout_s)

    async def adapters(self) -> dict[str, str]:
        """Served name -> the path vLLM loads it from, for every LoRA adapter it knows."""
        try:
            response = await self._http.get("/v1/models")
            response.raise_for_status()
        except httpx.HTTPError as error:
            raise VllmUnavailable(f"{type(error).__name__}: {error}") from error
        return {model["id"]: model.get("root") or "" for model in response.json()["data"]
                if model.get("parent")}  # the base has no parent; adapters name it

    async def version(self) -> str:
        """vLLM's own version, as GET /version tells it."""
        try:
            response = await self._http.get("/version")
            response.raise_for_status()
            return str(response.json()["version"])
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as error:
            raise VllmUnavailable(f"{type(error).__name__}: {error}") from error

    async def max_model_len(self) -> int | None:
        """The base model's context length, from its entry in the model list."""
        try:
            response = await self._http.get("/v1/models")
            response.raise_for_status()
            base: dict = next((m for m in response.json()["data"] if not m.get("parent")), {})
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as error:
            raise VllmUnavailable(f"{type(error).__name__}: {error}") from error
        value = base.get("max_model_len")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    async def load(self, name: str, path: str) -> None:
        response = await self._post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})
        if response.status_code == 400 and "already been loaded" in response.text:
            return  # loaded by an earlier pass whose answer was lost: the same name, the same bytes
        if response.status_code != 200:
            raise LoadRefused(response.status_code, _reason(response))

    async def unload(self, name: str) -> None:
        response = await self._post("/v1/unload_lora_adapter", {"lora_name": name})
        if response.status_code not in (200, 404):  # 404: already gone
            raise LoadRefused(response.status_code, _reason(response))

    async def _post(self, path: str, body: dict) -> httpx.Response:
        try:
            return await self._http.post(path, json=body)
        except httpx.HTTPError as error:
            raise VllmUnavailable(f"{type(error).__name__}: {error}") from error

    async def close(self) -> None:
        await self._http.aclose()


def _reason(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])[:1000]
    except (ValueError, KeyError, TypeError):
        return response.text[:1000]
